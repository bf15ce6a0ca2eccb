"""`tenure run` stops its command by the lease's deadline, before the store could grant the lock
to anyone else (docs/design.md rule 5), and says which of three things happened: renewals
failed (76), tenure was paused past the deadline (77), the store says the session is gone (78)."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from frozen import pause_outside_a_write
from tenure.testing.proxy import ChaosProxy

if TYPE_CHECKING:
    from conftest import Cli

# Records each moment it works, on the system-wide monotonic clock, so the test can tell when
# it last worked. On SIGTERM it notes it and goes on working for FINISH seconds (an ordinary
# graceful shutdown; "inf": it ignores SIGTERM), then exits.
CHILD = """
import os, signal, sys, time
log, pid_file, finish = open(sys.argv[1], "a", buffering=1), sys.argv[2], float(sys.argv[3])
until = [float("inf")]
def term(*_):
    log.write(f"term {time.monotonic()}\\n")
    until[0] = time.monotonic() + finish
signal.signal(signal.SIGTERM, term)
open(pid_file, "w").write(str(os.getpid()))
while time.monotonic() < until[0]:
    log.write(f"work {time.monotonic()}\\n")
    time.sleep(0.02)
"""


def _start(
    cli: Cli, *options: str, store: str = "", log: str = "log", finish: str = "inf"
) -> tuple[subprocess.Popen[str], int]:
    script = cli.tmp / "child.py"
    script.write_text(CHILD)
    pid_file = cli.tmp / f"{log}.pid"
    proc = cli.start(
        "run", "--store", store or cli.store, *options, "job", "--",
        sys.executable, str(script), str(cli.tmp / log), str(pid_file), finish,
    )  # fmt: skip
    return proc, cli.pid_in(pid_file.name)


def _log(cli: Cli, kind: str, log: str = "log") -> list[float]:
    try:
        lines = (cli.tmp / log).read_text().splitlines()
    except FileNotFoundError:
        return []
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


def test_a_command_that_obeys_sigterm_mid_outage_is_reported_lost(cli: Cli) -> None:
    """The command exits on SIGTERM, before the deadline, the store still unreachable: the
    lease was not renewed since, so it is lost (76, docs/stop-by.md), not 'recovered'."""
    proc, child = _start(cli, "--ttl", "3", finish="0")
    cli.until(lambda: cli.held("job"), what="the lock to be held")
    assert proc.stderr is not None
    blocker = sqlite3.connect(cli.db, isolation_level=None, timeout=10)
    blocker.execute("BEGIN EXCLUSIVE")  # no renewal can be confirmed until tenure's verdict
    lines: list[str] = []
    try:
        while not any("lost (" in line or "recovered" in line for line in lines):
            line = proc.stderr.readline()
            assert line, "".join(lines)
            lines.append(line)
        assert cli.gone(child) and _log(cli, "term")
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    _, rest = proc.communicate(timeout=10)
    err = "".join(lines) + rest
    assert proc.returncode == 76, err
    assert "lost (renewals failed): the deadline passed without a confirmed renewal" in err
    assert "recovered" not in err and "Traceback" not in err


def test_paused_past_the_deadline_kills_at_once(cli: Cli) -> None:
    proc, child = _start(cli, "--ttl", "1")
    cli.until(lambda: cli.held("job"), what="the lock to be held")
    pause_outside_a_write(  # tenure, not the command: its lease runs out meanwhile
        lambda: proc.send_signal(signal.SIGSTOP), lambda: proc.send_signal(signal.SIGCONT), cli.db
    )
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


def test_a_partitioned_holder_stops_before_the_next_one_starts(
    cli: Cli, postgres_store_url: str
) -> None:
    """The experiment of issue 15: PostgreSQL, the first `tenure run --ttl 3` through a proxy,
    a second waiting on a direct connection, a child that finishes for 5 s after SIGTERM; the
    proxy then drops every byte. Without lock-delay, so that only the stop-by rule separates
    the two children."""
    parts = urlsplit(postgres_store_url)
    assert parts.hostname is not None and parts.port is not None
    with ChaosProxy(parts.hostname, parts.port).start_in_thread() as proxy:
        proxied = urlunsplit(parts._replace(netloc=parts.netloc.replace(
            f"{parts.hostname}:{parts.port}", proxy.address)))  # fmt: skip
        first, _ = _start(cli, "--ttl", "3", "--lock-delay", "0", store=proxied, finish="5")
        second = cli.start(
            "run", "--store", postgres_store_url, "--ttl", "3", "job", "--", sys.executable,
            str(cli.tmp / "child.py"), str(cli.tmp / "second"), str(cli.tmp / "second.pid"), "5",
        )  # fmt: skip
        holders = ["ls", "--json", "--store", postgres_store_url, "job"]
        cli.until(lambda: '"waiters": 1' in cli(*holders).stdout, what="the second to queue")
        proxy.set_mode("blackhole")
        cut = time.monotonic()
        cli.pid_in("second.pid")
        proxy.heal()
    _, err = first.communicate(timeout=20)
    assert first.returncode == 76, err
    [term] = _log(cli, "term")
    last = _log(cli, "work")[-1]
    started = _log(cli, "work", "second")[0]
    print(
        f"\nSIGTERM {term - cut:.2f}s after the cut; first child's last work "
        f"{last - cut:.2f}s; second child's first work {started - cut:.2f}s: "
        f"{started - last:.2f}s apart, overlap {max(0.0, last - started):.2f}s"
    )
    assert last < started, "both children worked at once"
    second.kill()


def test_what_the_command_left_in_its_group_ends_before_the_release(cli: Cli) -> None:
    script = "sleep 30 & echo $! > child; exit 0"
    done = cli("run", "--store", cli.store, "job", "--", "sh", "-c", script, cwd=cli.tmp)
    assert done.returncode == 0, done.stderr
    assert cli.gone(int((cli.tmp / "child").read_text()))
