"""`tenure.apscheduler.OncePerFireTime` with real APScheduler 3 schedulers in separate processes
(tests/integrations/apscheduler_app.py) on one store: each fire time of a job scheduled in every
replica runs once across them, is in the history, and goes on through a SIGKILLed replica; the
same processes without the guard run fire times more than once (the check can fail)."""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import pytest

import tenure
from tenure.stores._clockshift import ClockShift

pytest.importorskip("apscheduler", reason="pip install 'tenure[apscheduler]'")

pytestmark = pytest.mark.timeout(60)
ROOT = Path(__file__).parents[2]
APP = Path(__file__).with_name("apscheduler_app.py")
JOB = "apscheduler:tick"


def wait_ready(procs: list[subprocess.Popen[str]], timeout: float = 30.0) -> None:
    """Until each process has printed "ready" (its scheduler started)."""
    deadline = time.monotonic() + timeout
    waiting = {proc.stdout: proc for proc in procs if proc.stdout is not None}
    while waiting:
        left = deadline - time.monotonic()
        assert left > 0, "replicas not ready in time"
        readable, _, _ = select.select(list(waiting), [], [], left)
        for stream in readable:
            line = stream.readline()
            assert line, f"replica {waiting[stream].pid} exited before it was ready"
            if line.strip() == "ready":
                del waiting[stream]


@contextmanager
def replicas(
    tmp: Path,
    store: str,
    n: int = 3,
    *,
    guard: bool = True,
    job_seconds: float = 1.2,
    ttl: float = 30.0,
    envs: list[dict[str, str]] | None = None,
) -> Iterator[list[subprocess.Popen[str]]]:
    """``n`` replicas of the app (``envs``: more variables for each), ready when entered;
    SIGTERMed (each finishes the job in hand) and reaped on leaving."""
    base = {
        **os.environ,
        "STORE": store,
        "OUT": str(tmp / "runs"),
        "GUARD": "1" if guard else "0",
        "JOB_SECONDS": str(job_seconds),
        "TTL": str(ttl),
    }
    procs = []
    try:
        for i in range(n):
            env = {**base, **(envs[i] if envs else {}), "REPLICA": f"replica-{i}"}
            err = open(tmp / f"replica-{i}.err", "w")  # noqa: SIM115  # the child keeps it
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(APP)],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    text=True,
                )
            )
            err.close()
        wait_ready(procs)
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


def lines(tmp: Path) -> list[tuple[str, float, int]]:
    """The app's own log: (start|end, fire time as a POSIX timestamp, pid) per line."""
    path = tmp / "runs"
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        kind, fire, pid = line.split()
        found.append((kind, datetime.fromisoformat(fire).timestamp(), int(pid)))
    return found


def window(begin: float, end: float) -> list[float]:
    """The whole seconds fired well inside [begin, end]: after every replica was ready, and
    long enough before the end that the fire time was due on every replica."""
    return [float(s) for s in range(int(begin + 0.5) + 1, int(end - 1.5) + 1)]


def starts(tmp: Path) -> dict[float, list[int]]:
    """Fire time → the pids that started it."""
    ran: dict[float, list[int]] = {}
    for kind, fire, pid in lines(tmp):
        if kind == "start":
            ran.setdefault(fire, []).append(pid)
    return ran


def history(store: str) -> dict[float, tenure.SlotRecord]:
    with tenure.connect(store) as client:
        return {datetime.fromisoformat(s.slot).timestamp(): s for s in client.history(JOB)}


def store_url(request: pytest.FixtureRequest, store: str) -> str:
    return str(request.getfixturevalue(f"{store}_store_url"))


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_each_fire_time_runs_once_across_three_schedulers(
    tmp_path: Path, request: pytest.FixtureRequest, store: str
) -> None:
    url = store_url(request, store)
    # A job of 1.2 s at one fire time a second, max_instances=1: the replica that ran the last
    # fire time is busy at the next one and leaves it to the others, so the work is spread.
    with replicas(tmp_path, url) as procs:
        begin = time.time()
        time.sleep(5.0)
        end = time.time()
    assert all(proc.returncode == 0 for proc in procs), [p.returncode for p in procs]
    ran, fired = starts(tmp_path), window(begin, end)
    assert len(fired) >= 3
    duplicated = {fire: pids for fire, pids in ran.items() if len(pids) > 1}
    assert not duplicated, f"fire times run more than once: {duplicated}"
    assert all(fire in ran for fire in fired), (fired, sorted(ran))
    runners = {ran[fire][0] for fire in fired}
    assert len(runners) >= 2, f"one replica ran every fire time: {runners}"
    assert runners <= {proc.pid for proc in procs}
    ended = {fire for kind, fire, _ in lines(tmp_path) if kind == "end"}
    records = history(url)
    for fire in fired:
        assert fire in ended
        slot = records[fire]
        assert (slot.state, slot.attempts, slot.pid) == ("done", 1, ran[fire][0]), slot
        assert slot.slot.endswith("+00:00") and slot.label.startswith("replica-")


def test_without_the_guard_fire_times_run_more_than_once(
    tmp_path: Path, sqlite_store_url: str
) -> None:
    # A short job: each replica runs every fire time (a long one would have each skip every
    # other fire time at max_instances=1, and replicas out of phase might never overlap).
    with replicas(tmp_path, sqlite_store_url, guard=False, job_seconds=0.1) as procs:
        begin = time.time()
        time.sleep(3.0)
        end = time.time()
    ran = starts(tmp_path)
    fired = [fire for fire in window(begin, end) if fire in ran]
    assert fired, sorted(ran)
    assert any(len(set(ran[fire])) > 1 for fire in fired), ran  # the check above can fail
    assert history(sqlite_store_url) == {}
    assert all(proc.returncode == 0 for proc in procs)


def test_a_killed_replica_leaves_its_fire_time_running_and_the_others_go_on(
    tmp_path: Path, sqlite_store_url: str
) -> None:
    # TTL 3 s: the killed replica's claim expires (and its lock-delay, one TTL, passes) inside
    # the test, and still nobody reruns that fire time: the other replicas have passed it.
    with replicas(tmp_path, sqlite_store_url, job_seconds=1.5, ttl=3.0) as procs:
        begin = time.time()
        by_pid = {proc.pid: proc for proc in procs}
        deadline = time.monotonic() + 10
        victim = None
        while victim is None:
            assert time.monotonic() < deadline, "no job started"
            started = [(f, p) for kind, f, p in lines(tmp_path) if kind == "start" and f > begin]
            if started:
                victim = started[0]
            else:
                time.sleep(0.02)
        killed_fire, killed_pid = victim
        by_pid[killed_pid].send_signal(signal.SIGKILL)
        killed_at = time.time()
        by_pid[killed_pid].wait()
        time.sleep(6.5)  # past the killed claim's TTL and lock-delay
        end = time.time()
    assert by_pid[killed_pid].returncode == -signal.SIGKILL
    survivors = {pid for pid in by_pid if pid != killed_pid}
    assert all(by_pid[pid].returncode == 0 for pid in survivors)
    log = lines(tmp_path)
    assert ("end", killed_fire, killed_pid) not in log, "the job was not running when killed"
    ran = starts(tmp_path)
    assert ran[killed_fire] == [killed_pid], "the killed replica's fire time ran again"
    later = [fire for fire in window(killed_at, end) if fire > killed_fire]
    assert len(later) >= 3
    for fire in later:
        assert len(ran.get(fire, [])) == 1, (fire, ran.get(fire))
        assert ran[fire][0] in survivors
    records = history(sqlite_store_url)
    killed = records[killed_fire]
    assert (killed.state, killed.pid, killed.attempts) == ("running", killed_pid, 1)
    assert all(records[fire].state == "done" for fire in later)


def test_replicas_whose_clocks_disagree_run_each_fire_time_once(
    tmp_path: Path, sqlite_store_url: str
) -> None:
    try:
        shifts = [ClockShift(tmp_path / f"clock{i}", s) for i, s in enumerate((-0.4, 0.0, 0.4))]
    except RuntimeError as exc:
        pytest.skip(str(exc))
    with replicas(tmp_path, sqlite_store_url, envs=[s.env({}) for s in shifts]):
        begin = time.time()
        time.sleep(4.0)
        end = time.time()
    ran = starts(tmp_path)
    assert not {fire: pids for fire, pids in ran.items() if len(pids) > 1}
    fired = window(begin + 0.5, end - 0.5)  # the slowest clock is 0.4 s behind
    assert fired and all(fire in ran for fire in fired), (fired, sorted(ran))
    records = history(sqlite_store_url)
    assert all(records[fire].state == "done" for fire in fired)


def test_the_docs_page_example_runs_as_written(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "apscheduler.md").read_text()
    code = page.split("```python\n", 1)[1].split("```", 1)[0]
    store = f"sqlite:///{tmp_path}/docs.db"
    env = {**os.environ, "TENURE_STORE": store, "RUN_FOR": "4"}
    copies = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [copy.communicate(timeout=30) for copy in copies]
    assert all(copy.returncode == 0 for copy in copies), [err for _, err in outputs]
    reports = [line for out, _ in outputs for line in out.splitlines()]
    fires = Counter(line.split()[2] for line in reports)  # "report for <fire time> ..."
    assert fires and max(fires.values()) == 1, reports
    with tenure.connect(store) as client:
        done = {s.slot for s in client.history("apscheduler:report") if s.state == "done"}
    assert set(fires) <= done


def test_the_example_project_runs_with_one_command(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "apscheduler" / "run.py"), "--seconds", "4"],
        capture_output=True,
        text=True,
        timeout=45,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "TENURE_STORE"},
    )
    assert done.returncode == 0, done.stderr
    ran = [line.split() for line in done.stdout.splitlines() if " ran " in line]
    fires = Counter(words[2] for words in ran)  # "<replica> ran <fire time> (token …)"
    assert len(fires) >= 2 and max(fires.values()) == 1, done.stdout
    table = done.stdout.split("$ tenure history apscheduler:report\n", 1)[1].splitlines()
    recorded = {row.split()[0]: row.split()[1] for row in table[1:]}
    assert all(recorded[fire] == "done" for fire in fires), table


def test_errors_and_misfires_are_recorded_failed_and_unanchored_intervals_warned(
    sqlite_store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.schedulers.background import BackgroundScheduler

    from tenure.apscheduler import OncePerFireTime

    def boom() -> None:
        raise ValueError("no report\ntoday")

    caplog.set_level(logging.WARNING, logger="tenure.apscheduler")
    with tenure.connect(sqlite_store_url) as client:
        guard = OncePerFireTime(client, ThreadPoolExecutor(max_workers=1))
        other = OncePerFireTime(client)  # each guard ends only the runs it claimed
        executors = {"default": guard, "other": other}
        scheduler = BackgroundScheduler(executors=executors, timezone="UTC")
        # One worker: "a-busy" (submitted first: same fire time, lower id) holds it for 1.5 s,
        # so "b-late" starts past its 1 s misfire grace at the fire times "a-busy" runs.
        scheduler.add_job(time.sleep, "cron", args=[1.5], second="*", id="a-busy")
        scheduler.add_job(print, "cron", second="*", id="b-late", misfire_grace_time=1)
        scheduler.add_job(boom, "cron", second="*", id="c-boom", executor="other")
        scheduler.add_job(print, "interval", seconds=1, id="d-unanchored", executor="other")
        scheduler.start()
        time.sleep(2.5)
        scheduler.shutdown()
        late = client.history("apscheduler:b-late")
        boomed = client.history("apscheduler:c-boom")
        busy = client.history("apscheduler:a-busy")
    missed = [s for s in late if s.state == "failed"]
    assert missed and all((s.error or "").startswith("missed:") for s in missed), late
    assert all(s.state == "done" for s in late if s not in missed)
    assert boomed and all(s.error == "ValueError: no report today" for s in boomed), boomed
    assert busy and all(s.state == "done" for s in busy)
    warned = [r.getMessage() for r in caplog.records if "between whole seconds" in r.getMessage()]
    assert len(warned) == 1 and "'d-unanchored'" in warned[0], warned


def test_without_apscheduler_the_import_says_what_to_install() -> None:
    code = "import sys; sys.modules['apscheduler'] = None; import tenure.apscheduler"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode != 0
    assert "pip install 'tenure[apscheduler]'" in done.stderr.splitlines()[-1]
