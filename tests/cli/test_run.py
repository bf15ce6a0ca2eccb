"""`tenure run`: exit codes, the child's environment, waiting, signals, death and lost leases."""

from __future__ import annotations

import os
import signal
import time
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import Cli

WAIT_FOR_GO = "while [ ! -e go ]; do sleep 0.02; done"


def test_exit_code_is_passed_through(cli: Cli) -> None:
    for code in (0, 7, 125):
        done = cli("run", "--store", cli.store, "job", "--", "sh", "-c", f"exit {code}")
        assert done.returncode == code, done.stderr
        assert done.stderr == ""


def test_killed_by_signal_n_exits_128_plus_n(cli: Cli) -> None:
    done = cli("run", "--store", cli.store, "job", "--", "sh", "-c", "kill -USR1 $$")
    assert done.returncode == 128 + signal.SIGUSR1
    assert cli.locks() == []


def test_child_environment_and_growing_tokens(cli: Cli) -> None:
    show = 'echo "$TENURE_TOKEN $TENURE_LOCK $TENURE_STORE"'
    first = cli("run", "--store", cli.store, "build", "--", "sh", "-c", show)
    second = cli("run", "--store", cli.store, "build", "--", "sh", "-c", show)
    assert first.returncode == second.returncode == 0
    token1, lock1, store1 = first.stdout.split()
    token2, lock2, store2 = second.stdout.split()
    assert int(token2) > int(token1) >= 1
    assert lock1 == lock2 == "build"
    assert store1 == store2 == cli.store


def test_store_from_environment(cli: Cli) -> None:
    env = {**os.environ, "TENURE_STORE": cli.store}
    done = cli("run", "job", "--", "sh", "-c", 'echo "$TENURE_STORE"', env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == cli.store
    assert cli.db.exists()


def test_concurrent_runs_serialize_and_busy_is_75(cli: Cli) -> None:
    log = cli.tmp / "log"
    holder = cli.start(
        "run",
        "--store",
        cli.store,
        "--label",
        "first",
        "L",
        "--",
        "sh",
        "-c",
        f"echo start >> log; {WAIT_FOR_GO}; echo end >> log",
        cwd=cli.tmp,
    )
    info = cli.until(lambda: cli.held("L"), what="the first run to hold L")
    assert info["holder"]["pid"] == holder.pid and info["holder"]["label"] == "first"

    busy = cli("run", "--store", cli.store, "--no-wait", "L", "--", "touch", "nowait-ran")
    assert busy.returncode == 75
    line = cli.one_error_line(busy.stderr)
    assert "not acquired" in line and f"pid {holder.pid}" in line

    began = time.monotonic()
    timed = cli("run", "--store", cli.store, "--timeout", "0.5", "L", "--", "touch", "timed-ran")
    assert timed.returncode == 75
    assert time.monotonic() - began >= 0.5
    assert "gave up" in timed.stderr
    assert not (cli.tmp / "nowait-ran").exists() and not (cli.tmp / "timed-ran").exists()

    waiter = cli.start(
        "run", "--store", cli.store, "L", "--", "sh", "-c", "echo second >> log", cwd=cli.tmp
    )
    cli.until(lambda: cli.held("L", waiters=1), what="the second run to queue")
    time.sleep(0.3)  # it must keep waiting while the first one holds
    assert waiter.poll() is None
    (cli.tmp / "go").touch()
    assert holder.wait(10) == 0
    _, err = waiter.communicate(timeout=10)
    assert waiter.returncode == 0, err
    assert log.read_text().split() == ["start", "end", "second"]
    waiting = [line for line in err.splitlines() if "waiting for lock 'L'" in line]
    assert len(waiting) == 1, err  # one line per change of holder, not one per poll
    assert f"pid {holder.pid} (label 'first')" in waiting[0] and "token 1" in waiting[0]
    assert cli.locks() == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signal_is_forwarded_to_the_childs_group(cli: Cli, signum: int) -> None:
    # The child starts a grandchild in its group; both must get the signal.
    script = (
        "sleep 30 & echo $! > grandchild; trap 'echo got >> marker; kill $!; exit 9' "
        f"{signal.Signals(signum).name[3:]}; echo $$ > child; wait"
    )
    proc = cli.start("run", "--store", cli.store, "job", "--", "sh", "-c", script, cwd=cli.tmp)
    child, grandchild = cli.pid_in("child"), cli.pid_in("grandchild")
    proc.send_signal(signum)
    assert proc.wait(10) == 9  # the child's own exit code, after its trap ran
    assert (cli.tmp / "marker").read_text() == "got\n"
    cli.until(lambda: cli.gone(child) and cli.gone(grandchild), what="the group to end")
    assert cli.locks() == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_child_killed_by_forwarded_signal(cli: Cli, signum: int) -> None:
    script = "echo $$ > child; exec sleep 30"
    proc = cli.start("run", "--store", cli.store, "job", "--", "sh", "-c", script, cwd=cli.tmp)
    child = cli.pid_in("child")
    proc.send_signal(signum)
    assert proc.wait(10) == 128 + signum
    assert cli.gone(child)
    assert cli.locks() == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_while_waiting_leaves_the_queue(cli: Cli, signum: int) -> None:
    cli.start("run", "--store", cli.store, "L", "--", "sh", "-c", WAIT_FOR_GO, cwd=cli.tmp)
    cli.until(lambda: cli.held("L"), what="the holder")
    waiter = cli.start("run", "--store", cli.store, "L", "--", "touch", "ran", cwd=cli.tmp)
    cli.until(lambda: cli.held("L", waiters=1), what="the waiter to queue")
    waiter.send_signal(signum)
    _, err = waiter.communicate(timeout=10)
    assert waiter.returncode == 128 + signum
    assert "Traceback" not in err
    assert f"interrupted by {signal.Signals(signum).name}" in err
    info = cli.held("L")
    assert info is not None and info["waiters"] == 0
    assert not (cli.tmp / "ran").exists()


def test_sigkill_of_tenure_kills_the_child(cli: Cli) -> None:
    script = "echo $$ > child; exec sleep 30"
    proc = cli.start("run", "--store", cli.store, "job", "--", "sh", "-c", script, cwd=cli.tmp)
    child = cli.pid_in("child")
    assert not cli.gone(child)
    proc.kill()
    proc.wait(5)
    cli.until(lambda: cli.gone(child), timeout=2, what="the child to die with tenure")
