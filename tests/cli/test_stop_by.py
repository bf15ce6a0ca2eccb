"""`tenure run` stops its command by the lease's deadline, before the store could grant the lock
to anyone else (DESIGN rule 5), and says which of three things happened: renewals failed (76),
tenure was paused past the deadline (77), the store says the session is gone (78)."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import Cli

# Ignores SIGTERM (only notes it) and records each moment it works, on the system-wide
# monotonic clock, so the test can tell when it last worked.
CHILD = """
import os, signal, sys, time
log = open(sys.argv[1], "a", buffering=1)
signal.signal(signal.SIGTERM, lambda *_: log.write(f"term {time.monotonic()}\\n"))
open(sys.argv[2], "w").write(str(os.getpid()))
while True:
    log.write(f"work {time.monotonic()}\\n")
    time.sleep(0.02)
"""


def _start(cli: Cli, *options: str) -> tuple[subprocess.Popen[str], int]:
    script = cli.tmp / "child.py"
    script.write_text(CHILD)
    proc = cli.start(
        "run", "--store", cli.store, *options, "job", "--",
        sys.executable, str(script), str(cli.tmp / "log"), str(cli.tmp / "child"),
    )  # fmt: skip
    return proc, cli.pid_in("child")


def _log(cli: Cli, kind: str) -> list[float]:
    lines = (cli.tmp / "log").read_text().splitlines()
    return [float(line.split()[1]) for line in lines if line.startswith(kind + " ")]


def test_failed_renewals_stop_the_command_by_the_deadline(cli: Cli) -> None:
    proc, child = _start(cli, "--ttl", "3")  # grace: the default, the largest allowed (0.87)
    cli.until(lambda: cli.held("job"), what="the lock to be held")
    blocker = sqlite3.connect(cli.db, isolation_level=None, timeout=10)
    blocker.execute("BEGIN EXCLUSIVE")  # every renewal now waits: it cannot be confirmed
    try:
        blocked = time.monotonic()
        # When the store would expire the lease: its clock is this host's boot clock.
        [(expires,)] = blocker.execute("SELECT expires FROM tenure_sessions").fetchall()
        store_expiry = blocked + expires - time.clock_gettime(time.CLOCK_BOOTTIME)
        cli.until(lambda: cli.gone(child), timeout=5, what="the command to be stopped")
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 76, err
    assert "renewals are overdue" in err and "Traceback" not in err
    [term] = _log(cli, "term")
    last = _log(cli, "work")[-1]
    assert blocked - 1.2 + 2.0 <= term <= blocked + 2.0 + 0.5, "SIGTERM once renewals overdue"
    assert last - term <= 0.87 + 0.3, "SIGKILL --grace after SIGTERM, at the deadline"
    assert last < store_expiry, "the command worked past the store's expiry of its lease"


def test_paused_past_the_deadline_kills_at_once(cli: Cli) -> None:
    proc, child = _start(cli, "--ttl", "1")
    cli.until(lambda: cli.held("job"), what="the lock to be held")
    proc.send_signal(signal.SIGSTOP)  # tenure, not the command: its lease runs out meanwhile
    time.sleep(1.5)
    assert cli.locks() == []  # the store expired it
    resumed = time.monotonic()
    proc.send_signal(signal.SIGCONT)
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 77, err
    assert "paused past the deadline" in err and "Traceback" not in err
    assert cli.gone(child)
    assert _log(cli, "term") == [], "no grace: someone else may hold the lock already"
    assert _log(cli, "work")[-1] - resumed < 0.5


def test_store_saying_the_session_is_gone_kills_at_once(cli: Cli) -> None:
    proc, child = _start(cli, "--ttl", "3")
    cli.until(lambda: cli.held("job"), what="the lock to be held")
    with sqlite3.connect(cli.db, timeout=10) as db:  # what an operator's clean-up would do
        db.execute("DELETE FROM tenure_sessions")
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 78, err
    assert "the store says the session is gone" in err and "Traceback" not in err
    assert cli.gone(child)
    assert _log(cli, "term") == []


def test_a_grace_without_room_for_renewals_is_refused(cli: Cli) -> None:
    done = cli("run", "--store", cli.store, "--ttl", "3", "--grace", "8", "job", "--", "true")
    assert done.returncode == 2
    line = cli.one_error_line(done.stderr)
    assert "largest grace is 0.87s" in line
    assert not Path(cli.db).exists()  # refused before the store was opened


def test_what_the_command_left_in_its_group_ends_before_the_release(cli: Cli) -> None:
    script = "sleep 30 & echo $! > child; exit 0"
    done = cli("run", "--store", cli.store, "job", "--", "sh", "-c", script, cwd=cli.tmp)
    assert done.returncode == 0, done.stderr
    assert cli.gone(int((cli.tmp / "child").read_text()))
