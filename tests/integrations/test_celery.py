"""tenure.celery with real Celery: workers and beat processes over a real Redis broker, and the
tenure store they share. Beat: every beat process runs ``LeaderScheduler``; the leader is
SIGKILLed, then the next one SIGSTOPped past its term, and every fire time is sent once, in term
order (a resumed former leader sends nothing). Tasks: ``ExclusiveTask`` runs one call per key,
and the lock of a SIGKILLed worker ends with its lease."""

from __future__ import annotations

import importlib
import itertools
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import tenure
from frozen import pause_outside_a_write
from tenure.stores.redis.server import RedisServer
from tenure_tools.celery_nodes import CeleryNodes, fail_over, read_ticks, wait_until

pytest.importorskip("celery")

ROOT = Path(__file__).parents[2]
APP = ROOT / "examples" / "celery"
TTL = 1.0
ELECTION = "celery-beat:celery_example"
_databases = itertools.count(1)
pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def nodes(
    tmp_path: Path, redis_server: RedisServer, sqlite_store_url: str
) -> Iterator[CeleryNodes]:
    """Celery processes of examples/celery/celery_example.py on a Redis database of their own."""
    database = next(_databases) % 16
    broker = f"redis://{redis_server.endpoint}/{database}"
    env = {
        "CELERY_BROKER_URL": broker,
        "CELERY_RESULT_BACKEND": broker,
        "TENURE_STORE": sqlite_store_url,
        "OUT": str(tmp_path / "out"),
        "TICK_EVERY": "1",
        "BEAT_TTL": str(TTL),
    }
    (tmp_path / "out").touch()
    with CeleryNodes("celery_example", APP, tmp_path, env) as running:
        yield running


def lines(nodes: CeleryNodes, kind: str) -> list[list[str]]:
    text = Path(nodes.env["OUT"]).read_text()
    return [line.split()[1:] for line in text.splitlines() if line.startswith(f"{kind} ")]


def ticks(nodes: CeleryNodes) -> list[tuple[datetime, int]]:
    """(slot, term) of every tick the worker ran, in the order it ran them."""
    return [(tick.slot, tick.term) for tick in read_ticks(Path(nodes.env["OUT"])) if tick.slot]


def wait_for_ticks(nodes: CeleryNodes, count: int, term: int | None = None) -> None:
    """Until ``count`` more ticks ran (of ``term``, if given)."""
    seen = sum(1 for _, t in ticks(nodes) if term is None or t == term)
    wait_until(
        lambda: sum(1 for _, t in ticks(nodes) if term is None or t == term) >= seen + count,
        30.0,
        f"{count} ticks",
    )


def test_beat_on_every_node_sends_each_fire_time_once_across_kill_and_pause(
    nodes: CeleryNodes, sqlite_store_url: str
) -> None:
    nodes.worker("worker")
    for i in range(3):
        nodes.beat(f"beat{i}")
    wait_for_ticks(nodes, 2)  # ready: a leader ticks
    with tenure.connect(sqlite_store_url) as client:
        killed = fail_over(nodes, client, ELECTION, Path(nodes.env["OUT"]))
        second, term = killed.successor, killed.term
        wait_for_ticks(nodes, 2, term)
        beat = nodes.nodes[second]  # paused past its term:
        pause_outside_a_write(beat.pause, beat.resume, sqlite_store_url.removeprefix("sqlite:///"))
        _third, term = nodes.leader(client, ELECTION, not_term=term)
        wait_for_ticks(nodes, 2, term)
        nodes.nodes[second].resume()
        wait_for_ticks(nodes, 3, term)
        for name in ("beat0", "beat1", "beat2"):
            nodes.nodes[name].stop()
        time.sleep(1.0)  # the worker runs what was sent last
        history = {slot.slot: slot for slot in client.history(f"{ELECTION}/tick")}

    ran = ticks(nodes)
    slots = sorted({slot for slot, _ in ran})
    assert len({t for _, t in ran}) >= 3, ran  # three leaders ticked
    # None lost: every second from the first tick to the last was sent.
    assert slots == [slots[0] + timedelta(seconds=i) for i in range(len(slots))], slots
    # None doubled, but for the one window at-least-once leaves: a leader killed after the
    # broker took a tick and before the store recorded it (the next leader's is attempt 2).
    doubled = [slot for slot, n in Counter(slot for slot, _ in ran).items() if n > 1]
    for slot in doubled:
        assert history[slot.isoformat(timespec="milliseconds")].attempts >= 2, (slot, ran)
    # A resumed former leader sent nothing: terms only grow in the order the worker got them.
    terms = [t for _, t in ran]
    assert terms == sorted(terms), ran
    assert all(slot.state == "done" for slot in history.values())
    assert set(history) >= {s.isoformat(timespec="milliseconds") for s in slots}
    assert "lost the lead" in nodes.log(second).read_text()


def test_plain_beat_on_two_nodes_sends_each_tick_twice(nodes: CeleryNodes) -> None:
    """The control: Celery's own scheduler on two nodes — what the check above would catch."""
    nodes.worker("worker")
    for i in range(2):
        nodes.beat(f"plain{i}", scheduler="celery.beat:PersistentScheduler")
    wait_until(lambda: len(lines(nodes, "tick")) >= 2, 30.0, "both beats tick")
    start = len(lines(nodes, "tick"))
    time.sleep(4.0)
    assert len(lines(nodes, "tick")) - start >= 6  # about 8: each second twice


def example_app(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The example's module, imported here (to send its tasks)."""
    monkeypatch.syspath_prepend(str(APP))
    return importlib.import_module("celery_example")


def test_exclusive_task_runs_one_call_per_key_and_its_lock_ends_with_a_killed_worker(
    nodes: CeleryNodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    example = example_app(monkeypatch)
    sync_account, sync_account_later = example.sync_account, example.sync_account_later

    nodes.worker("prefork", pool="prefork", concurrency=2)  # forked children: a client each
    nodes.worker("solo")
    sync_account.app.conf.update(
        broker_url=nodes.env["CELERY_BROKER_URL"], result_backend=nodes.env["CELERY_RESULT_BACKEND"]
    )
    first = sync_account.delay("k", 30.0)
    wait_until(lambda: lines(nodes, "start"), 30.0, "the first call started")
    others = [sync_account.delay("k", 0.0) for _ in range(3)]
    other_key = sync_account.delay("other", 0.0)
    assert other_key.get(timeout=30) >= 1  # another key runs meanwhile
    wait_until(lambda: all(r.state == "SKIPPED" for r in others), 30.0, "the others skipped")
    assert all(r.info["lock"] == "celery:accounts:k" for r in others)
    runner_pid = int(lines(nodes, "start")[0][1])
    assert all(r.info["holder"].endswith(f"pid {runner_pid}") for r in others)

    # The worker running it dies; its lock ends with its lease, and a retrying call runs.
    running = next(name for name in ("prefork", "solo") if runner_pid in child_pids(nodes, name))
    nodes.nodes[running].kill()
    assert first.state != "SUCCESS"
    retried = sync_account_later.delay("k")
    token = retried.get(timeout=30)
    starts = [line for line in lines(nodes, "start") if line[0] == "k"]
    assert len(starts) == 2, starts  # the killed call, then the retried one
    assert token >= 2  # a later grant of the same lock
    retries = int(starts[1][3])
    assert retries >= 1, "the killed worker's lock held until its lease ended"


def child_pids(nodes: CeleryNodes, name: str) -> set[int]:
    """The worker's process and its pool's children (its process group)."""
    node = nodes.nodes[name]
    assert node.proc is not None
    group = node.proc.pid
    found = {group}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) == group:
                    found.add(int(entry.name))
            except ProcessLookupError:
                continue
    return found


def test_a_bad_lock_key_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    sync_account = example_app(monkeypatch).sync_account
    with pytest.raises(tenure.InvalidArgument, match="does not fit the call's arguments"):
        sync_account.lock_name()


def test_the_docs_page_example_runs_as_written(
    tmp_path: Path,
    redis_server: RedisServer,
    sqlite_store_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    page = (ROOT / "docs" / "celery.md").read_text()
    (tmp_path / "proj.py").write_text(page.split("```python\n", 1)[1].split("```", 1)[0])
    broker = f"redis://{redis_server.endpoint}/{next(_databases) % 16}"
    env = {"CELERY_BROKER_URL": broker, "CELERY_RESULT_BACKEND": broker}
    with CeleryNodes("proj", tmp_path, tmp_path, {**env, "TENURE_STORE": sqlite_store_url}) as run:
        run.worker("worker", pool="prefork", concurrency=2)  # two calls at once
        run.beat("beat0")
        run.beat("beat1")

        def refreshed() -> list[list[str]]:
            log = run.log("worker").read_text().splitlines()
            return [line.split("refresh ", 1)[1].split() for line in log if "] refresh " in line]

        wait_until(lambda: len(refreshed()) >= 3, 30.0, "three refreshes")
        slots = [slot for slot, _, _term in refreshed()]
        assert len(slots) == len(set(slots)), slots  # two beats, each fire time once
        assert {term for _slot, _, term in refreshed()} == {"1"}

        monkeypatch.syspath_prepend(tmp_path)
        monkeypatch.setenv("CELERY_BROKER_URL", broker)  # read as the module is imported
        proj = importlib.import_module("proj")
        proj.app.conf.result_backend = broker
        calls = [proj.sync_account.delay(7) for _ in range(2)]
        wait_until(lambda: all(c.state in ("SUCCESS", "SKIPPED") for c in calls), 30.0, "calls")
        assert sorted(c.state for c in calls) == ["SKIPPED", "SUCCESS"]


def test_the_example_project_runs_with_one_command() -> None:
    done = subprocess.run(
        [sys.executable, str(APP / "run.py")], capture_output=True, text=True, timeout=150
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    terms = [int(line.split()[1]) for line in lines[1:] if line[:2].isdigit()]
    assert terms == sorted(terms) and terms[0] < terms[-1], done.stdout
    assert "took over as term" in done.stdout
    # None twice, but for the at-least-once window (a kill between send and record).
    again = int(lines[-2].rsplit(" ", 1)[1])
    assert lines[-1] == f"fire times run twice: {again}", done.stdout
