"""`tenure once`, `tenure cron` and `tenure history` with real processes standing in for the five
servers of a nightly job: every slot runs once, through crashes, pauses and clocks that disagree."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import tenure
from frozen import pause_outside_a_write
from tenure.cli.schedule import due_of
from tenure.stores._clockshift import ClockShift

if TYPE_CHECKING:
    from conftest import Cli

pytestmark = pytest.mark.timeout(120)
# exec: the sleep is the runner's child itself, and dies with it (a forked sleep would outlive a
# killed runner and hold its output pipes open until it ends: 27 s of each kill test's teardown).
JOB_LINE = 'echo "$TENURE_SLOT {who} $TENURE_ATTEMPT $TENURE_TOKEN" >> {log}; exec sleep {sleep}'


def history(cli: Cli, store: str, job: str) -> list[dict[str, Any]]:
    done = cli("history", job, "--json", "--store", store)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def runs(log: Path) -> list[list[str]]:
    """The job's own log: one ``slot who attempt token`` line per run."""
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


def start_daemons(
    cli: Cli, store: str, schedule: str, *, envs: list[dict[str, str] | None], sleep: float = 0.2
) -> list[subprocess.Popen[str]]:
    log = cli.tmp / "runs"
    argv = ["cron", schedule, "report", "--store", store, "--ttl", "10", "--jitter", "0.3", "-q"]
    return [
        cli.start(
            *argv,
            "--label",
            f"s{i}",
            "--",
            "sh",
            "-c",
            JOB_LINE.format(who=f"s{i}", log=log, sleep=sleep),
            env=env,
        )
        for i, env in enumerate(envs)
    ]


def stop(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        _, err = proc.communicate(timeout=20)
        assert "Traceback" not in err, err


def assert_each_slot_once(cli: Cli, store: str, slots: int, interval: float) -> None:
    lines = runs(cli.tmp / "runs")
    ran = [line[0] for line in lines]
    last = max(ran, key=due_of)
    earlier = [slot for slot in ran if slot != last]
    assert len(earlier) == len(set(earlier)), f"a slot ran twice: {lines}"
    # The slot running at the stop may run again, as a new attempt each time: a daemon stopped
    # mid-slot records no end, and one not stopped yet may claim it (at least once).
    attempts = [int(attempt) for slot, _, attempt, _ in lines if slot == last]
    assert attempts == sorted(set(attempts)), f"the last slot ran twice in one attempt: {lines}"
    assert len(set(ran)) >= slots
    due = sorted(due_of(slot) for slot in set(ran))
    gaps = {round(b - a, 3) for a, b in itertools.pairwise(due)}
    assert gaps == {interval}, f"a slot was skipped: {sorted(ran)}"
    recorded = {row["slot"]: row for row in history(cli, store, "report")}
    for slot, who, attempt, token in lines:
        row = recorded[slot]  # every run is in the history, by the server that ran it
        if slot == last and row["state"] == "running":
            # Stopped mid-slot: its end is not recorded and the slot is left to another daemon
            # (docs/once.md), which may claim it again before its own stop reaches it.
            assert (row["attempts"], row["token"]) >= (int(attempt), int(token)), row
            continue
        assert (row["label"], row["attempts"], row["token"]) == (who, int(attempt), int(token))
        assert row["state"] == "done", row


@pytest.mark.parametrize("store_kind", ["sqlite", "postgres"])
def test_five_cron_daemons_run_every_slot_exactly_once(
    cli: Cli, store_kind: str, request: pytest.FixtureRequest
) -> None:
    store = cli.store if store_kind == "sqlite" else request.getfixturevalue("postgres_store_url")
    daemons = start_daemons(cli, store, "every 1.5s", envs=[None] * 5)
    cli.until(lambda: len(runs(cli.tmp / "runs")) >= 10, timeout=60, what="10 slots run")
    stop(daemons)
    assert_each_slot_once(cli, store, 10, 1.5)
    table = cli("history", "report", "--store", store).stdout.splitlines()
    assert table[0].split()[:3] == ["SLOT", "STATE", "SERVER"] and len(table) >= 11


def test_clocks_two_seconds_apart_still_run_each_slot_once(cli: Cli) -> None:
    """Each daemon's wall clock (CLOCK_REALTIME, shifted by clockshift.c) is off by -2..+2 s:
    they name the slots alike, so each runs once, and none is skipped."""
    shifts = [
        ClockShift(cli.tmp / f"clock{i}", seconds) for i, seconds in enumerate((-2, -1, 0, 1, 2))
    ]
    try:
        daemons = start_daemons(cli, cli.store, "every 2s", envs=[s.env() for s in shifts])
        cli.until(lambda: len(runs(cli.tmp / "runs")) >= 6, timeout=60, what="6 slots run")
        stop(daemons)
    finally:
        for shift in shifts:
            shift.close()
    assert_each_slot_once(cli, cli.store, 6, 2.0)


def test_five_racing_invocations_one_runs(cli: Cli) -> None:
    log = cli.tmp / "runs"
    line = JOB_LINE.format(who="x", log=log, sleep=2)
    argv = ["once", "nightly", "--slot", "2026-12-01", "--store", cli.store]
    procs = [cli.start(*argv, "--", "sh", "-c", line) for _ in range(5)]
    codes = sorted(proc.wait(20) for proc in procs)
    assert codes == [0, 75, 75, 75, 75], [p.communicate() for p in procs]
    assert len(runs(log)) == 1
    again = cli("once", "nightly", "--slot", "2026-12-01", "--store", cli.store, "--", "false")
    assert again.returncode == 0 and "already done" in again.stderr
    assert len(runs(log)) == 1


@pytest.mark.parametrize(
    ("policy", "state", "attempts", "ran"),
    [("at-least-once", "done", 2, 2), ("at-most-once", "failed", 1, 1)],
)
def test_runner_killed_mid_job(cli: Cli, policy: str, state: str, attempts: int, ran: int) -> None:
    log = cli.tmp / "runs"

    def once(who: str, sleep: float) -> subprocess.Popen[str]:
        return cli.start(
            "once", "nightly", "--slot", "s1", "--store", cli.store, "--ttl", "1",
            "--policy", policy, "--wait", "--label", who, "--",
            "sh", "-c", JOB_LINE.format(who=who, log=log, sleep=sleep),
        )  # fmt: skip

    a = once("a", 30)
    cli.until(lambda: runs(log), what="a running")
    b = once("b", 0)
    cli.until(lambda: cli.held("once:nightly/s1", waiters=1), what="b waiting")
    a.send_signal(signal.SIGKILL)  # its command dies with it (PR_SET_PDEATHSIG)
    assert b.wait(20) == 0, b.communicate()
    slot = history(cli, cli.store, "nightly")[0]
    assert (slot["state"], slot["attempts"]) == (state, attempts)
    assert len(runs(log)) == ran
    if policy == "at-least-once":
        assert slot["label"] == "b" and runs(log)[-1][1:3] == ["b", "2"]
    else:
        assert "ended without recording" in slot["error"]


def test_a_paused_runner_does_not_record_its_late_end(cli: Cli) -> None:
    """A (command and all) is stopped past its TTL; B takes the slot over and records it. When
    A resumes past its deadline, its command is killed at once and its end is not recorded: one
    completion only."""
    log = cli.tmp / "runs"

    def once(who: str, sleep: float) -> subprocess.Popen[str]:
        return cli.start(
            "once", "nightly", "--slot", "s1", "--store", cli.store, "--ttl", "1", "--wait",
            "--label", who, "--", "sh", "-c", JOB_LINE.format(who=who, log=log, sleep=sleep),
            start_new_session=True,
        )  # fmt: skip

    a = once("a", 1.5)
    cli.until(lambda: runs(log), what="a running")
    b = once("b", 0)
    cli.until(lambda: cli.held("once:nightly/s1", waiters=1), what="b waiting")
    pause_outside_a_write(
        lambda: os.killpg(a.pid, signal.SIGSTOP), lambda: os.killpg(a.pid, signal.SIGCONT), cli.db
    )
    try:
        assert b.wait(20) == 0, b.communicate()
    finally:
        time.sleep(0.1)
        os.killpg(a.pid, signal.SIGCONT)
    assert a.wait(20) == 77  # paused past the deadline: nothing recorded
    _, err = a.communicate()
    assert "paused past the deadline" in err
    slot = history(cli, cli.store, "nightly")[0]
    assert (slot["state"], slot["label"], slot["attempts"]) == ("done", "b", 2)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_cron_says_what_it_waits_for_and_a_requested_stop_exits_0(
    cli: Cli, signum: signal.Signals
) -> None:
    """One line at start; SIGTERM (systemctl stop) or SIGINT while idle: exit 0, so the unit
    of docs/once.md does not show as failed."""
    daemon = cli.start("cron", "every 1h", "report", "--store", cli.store, "--", "true")
    assert daemon.stderr is not None
    start = daemon.stderr.readline()  # its first frame: it is up, waiting for the slot
    assert start.startswith("tenure: cron 'report' on 'every 1h' (UTC): next slot 20"), start
    assert f"; store {cli.store}" in start and ":00:00Z in " in start
    daemon.send_signal(signum)
    _, err = daemon.communicate(timeout=20)
    assert daemon.returncode == 0, err
    assert err == f"tenure: cron 'report' stopped by {signum.name}\n"


def test_cron_stopped_while_a_slot_runs_exits_0_and_leaves_the_slot(cli: Cli) -> None:
    """Stopped mid-slot: the command gets the signal, the slot's end is not recorded (another
    server takes it over), and the daemon exits 0: the stop was asked for."""
    work = "touch running; sleep 30"
    daemon = cli.start(
        "cron", "every 1s", "report", "--store", cli.store, "--jitter", "0", "--",
        "sh", "-c", work, cwd=cli.tmp,
    )  # fmt: skip
    cli.until(lambda: (cli.tmp / "running").exists(), what="a slot running")
    daemon.send_signal(signal.SIGTERM)
    _, err = daemon.communicate(timeout=20)
    assert daemon.returncode == 0, err
    assert "stopped by a signal; end not recorded" in err and "Traceback" not in err
    [slot] = history(cli, cli.store, "report")
    assert slot["state"] == "running" and slot["exit_code"] is None


def test_history_shows_a_raised_functions_error_and_no_exit_code(cli: Cli) -> None:
    with tenure.connect(cli.store) as client:

        @client.once("fn", "s1")
        def job() -> None:
            raise RuntimeError("the disk is full")

        with pytest.raises(RuntimeError):
            job()
    done = cli("history", "fn", "--store", cli.store)
    assert done.returncode == 0, done.stderr
    header, row = done.stdout.splitlines()
    assert header.split()[-2:] == ["EXIT", "ERROR"]
    assert row.split()[:2] == ["s1", "failed"]
    assert row.endswith("  -     RuntimeError: the disk is full"), row


@pytest.mark.parametrize("count", ["0", "-1"])
def test_history_refuses_a_count_below_one(cli: Cli, count: str) -> None:
    done = cli("history", "job", "--last", count, "--store", cli.store)
    assert done.returncode == 2
    assert "Invalid value for '--last'" in cli.one_error_line(done.stderr)


def test_history_lists_jobs_and_says_when_a_runner_is_gone(cli: Cli) -> None:
    """Without a job: the jobs that have records. A slot whose runner was SIGKILLed stays
    recorded 'running'; once its lease is over it is shown as 'running (runner gone)'."""
    assert cli("once", "a-job", "--slot", "s1", "--store", cli.store, "--", "true").returncode == 0
    runner = cli.start(
        "once", "nightly", "--slot", "s1", "--store", cli.store, "--ttl", "1", "--",
        "sh", "-c", "touch running; exec sleep 30", cwd=cli.tmp,
    )  # fmt: skip
    cli.until(lambda: (cli.tmp / "running").exists(), what="the slot running")
    listing = cli("history", "--store", cli.store).stdout.splitlines()
    assert [line.split() for line in listing] == [
        ["JOB", "SLOTS", "LAST", "SLOT", "STATE"],
        ["a-job", "1", "s1", "done"],
        ["nightly", "1", "s1", "running"],  # its runner is alive: no hint
    ]
    runner.kill()  # its command dies with it (PR_SET_PDEATHSIG); nothing records an end

    def shown() -> str:
        return cli("history", "nightly", "--store", cli.store).stdout

    assert "running (runner gone)" in cli.until(
        lambda: "runner gone" in shown() and shown(), what="the lease to run out"
    )
    [slot] = history(cli, cli.store, "nightly")
    assert (slot["state"], slot["runner_gone"]) == ("running", True)
    listing = cli("history", "--store", cli.store).stdout.splitlines()
    assert listing[-1].split() == ["nightly", "1", "s1", "running", "(runner", "gone)"]


def test_bad_input_is_one_line(cli: Cli) -> None:
    for args in (
        ["once", "job", "--slot", "", "--", "true"],
        ["once", "job", "--slot", "s", "--policy", "sometimes", "--", "true"],
        ["cron", "every 1x", "job", "--", "true"],
        ["cron", "61 * * * *", "job", "--", "true"],
        ["cron", "every 1s", "job", "--count", "0", "--", "true"],
    ):
        done = (
            cli(*args, "--store", cli.store)
            if args[0] == "history"
            else cli(*args[: args.index("--")], "--store", cli.store, *args[args.index("--") :])
        )
        assert done.returncode == 2, (args, done.stderr)
        cli.one_error_line(done.stderr)
    assert cli.locks() == []
