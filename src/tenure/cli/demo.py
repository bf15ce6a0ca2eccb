"""``tenure demo``: why fencing tokens matter, told with real processes.

Two worker processes share one lock on the embedded store and write to one resource (an SQLite
file). Worker A checks its lease, then pauses (SIGSTOP: a long GC pause) before its next write;
its lease runs out; worker B gets the lock with a higher token and writes; A wakes up and writes
with its old token. With `tenure.fence` the resource refuses A's stale write; without it, A's
write lands on top of B's and B's update is lost.

Workers run ``python -c "from tenure.cli.demo import worker; worker()"`` and report events as
JSON lines on stdout; the parent narrates. Every worker is killed in ``finally`` and dies with
the parent (PR_SET_PDEATHSIG), so none is left behind.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

import click

import tenure
from tenure.fence import SQLFence

from . import EXIT_OK
from .child import die_with_parent_setter

LOCK = "demo"
RESOURCE = "doc"
TTL = 1.0
STEP_TIMEOUT = 15.0
"""Seconds a worker may take for one step before the demo gives up (normally well under 1)."""
FENCE = SQLFence()


class DemoFailed(tenure.TenureError):
    """A worker did not do what the story needs (it is a demo: say so, do not hang)."""


# -- the workers -----------------------------------------------------------------------------


def worker(argv: list[str] | None = None) -> None:
    """A worker's main: ``ROLE STORE_URL RESOURCE_PATH FENCED`` (FENCED is 1 or 0)."""
    role, store, resource, fenced = argv if argv is not None else sys.argv[1:]
    with tenure.connect(store, label=f"demo worker {role}") as client:
        db = sqlite3.connect(resource, isolation_level=None, timeout=10)
        if role == "B":
            sys.stdin.readline()  # the parent says when
        lease = client.lock(LOCK, ttl=TTL).acquire(timeout=STEP_TIMEOUT)
        _emit(event="acquired", token=lease.token)
        _write(db, fenced == "1", lease.token, f"{role}-1")
        if role == "A":
            lease.check()  # still valid here...
            _emit(event="checked", remaining=round(lease.remaining(), 2))
            os.kill(os.getpid(), signal.SIGSTOP)  # ...and paused right after the check
            _write(db, fenced == "1", lease.token, "A-2")
        lease.release()
        _emit(event="released")


def _emit(**event: object) -> None:
    print(json.dumps(event), flush=True)


def _write(db: sqlite3.Connection, fenced: bool, token: int, text: str) -> None:
    update = "UPDATE doc SET body = ?, token = ? WHERE id = 1"
    try:
        if fenced:
            with FENCE.fenced(db, RESOURCE, token) as cur:
                cur.execute(update, (text, token))
        else:
            db.execute(update, (text, token))
    except tenure.StaleToken as exc:
        _emit(event="refused", text=text, token=token, error=str(exc))
    else:
        _emit(event="wrote", text=text, token=token)


class Worker:
    """One worker process, read event by event with a deadline."""

    def __init__(self, role: str, store: str, resource: Path, fenced: bool, log: Path) -> None:
        self.role = role
        self.log = log
        code = "from tenure.cli.demo import worker; worker()"
        argv = [sys.executable, "-c", code, role, store, str(resource), "1" if fenced else "0"]
        with log.open("wb") as err:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                preexec_fn=die_with_parent_setter(),
            )
        self._buffer = b""

    def expect(self, *events: str) -> dict[str, Any]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + STEP_TIMEOUT
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DemoFailed(f"worker {self.role} did not report {'/'.join(events)} in time")
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            chunk = os.read(self.proc.stdout.fileno(), 4096) if ready else b""
            if ready and not chunk:
                raise DemoFailed(f"worker {self.role} ended early: {self._last_error()}")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        event: dict[str, Any] = json.loads(line)
        if event.get("event") not in events:
            raise DemoFailed(f"worker {self.role} reported {event}, expected {'/'.join(events)}")
        return event

    def _last_error(self) -> str:
        lines = self.log.read_text(errors="replace").strip().splitlines()
        return lines[-1] if lines else f"exit code {self.proc.wait()}"

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()

    def wait_stopped(self) -> None:
        """Return once the worker is stopped (SIGSTOP), as its parent sees it."""
        deadline = time.monotonic() + STEP_TIMEOUT
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.proc.pid, os.WUNTRACED | os.WNOHANG)
            if pid and os.WIFSTOPPED(status):
                return
            if pid:
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                raise DemoFailed(f"worker {self.role} ended instead of pausing")
            time.sleep(0.01)
        raise DemoFailed(f"worker {self.role} did not pause in time")

    def finish(self) -> None:
        try:
            code = self.proc.wait(STEP_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise DemoFailed(f"worker {self.role} did not finish in time") from None
        if code != 0:
            raise DemoFailed(f"worker {self.role} failed: {self._last_error()}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


# -- the story -------------------------------------------------------------------------------


class Narrator:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.step = 0

    def title(self, text: str) -> None:
        click.echo(f"\n{text}", file=self.out)
        self.step = 0

    def say(self, text: str) -> None:
        self.step += 1
        click.echo(f"{self.step:>2}. {text}", file=self.out)


def _resource(path: Path, fenced: bool) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("CREATE TABLE doc (id INTEGER PRIMARY KEY, body TEXT NOT NULL, token INTEGER)")
        db.execute("INSERT INTO doc VALUES (1, 'empty', NULL)")
        if fenced:
            FENCE.ensure_table(db)
    finally:
        db.close()


def holds(path: Path) -> str:
    db = sqlite3.connect(path)
    try:
        body, token = db.execute("SELECT body, token FROM doc WHERE id = 1").fetchone()
    finally:
        db.close()
    return f"{body!r} (written with token {token})"


def story(say: Narrator, folder: Path, store: str, fenced: bool) -> None:
    resource = folder / ("fenced.db" if fenced else "unfenced.db")
    _resource(resource, fenced)
    workers = [Worker(role, store, resource, fenced, folder / f"{role}.log") for role in "AB"]
    a, b = workers
    try:
        token_a = a.expect("acquired")["token"]
        say.say(f"A takes lock {LOCK!r} (ttl {TTL:g}s): token {token_a}")
        wrote = a.expect("wrote")
        say.say(f"A writes {wrote['text']!r} with token {token_a}: accepted")
        left = a.expect("checked")["remaining"]
        say.say(
            f"A checks its lease ({left:.2f}s left) and, right after the check, pauses before "
            "its next write (SIGSTOP, like a long GC pause)"
        )
        a.wait_stopped()
        say.say("A is stopped; its lease runs out at the store while it sleeps")
        b.go()
        token_b = b.expect("acquired")["token"]
        say.say(
            f"B takes lock {LOCK!r} once A's lease has expired and its lock-delay "
            f"({TTL:g}s) has passed: token {token_b}"
        )
        wrote = b.expect("wrote")
        say.say(f"B writes {wrote['text']!r} with token {token_b}: accepted")
        b.expect("released")
        b.finish()
        say.say(f"the resource holds {holds(resource)}")
        a.proc.send_signal(signal.SIGCONT)
        late = a.expect("wrote", "refused")
        if late["event"] == "refused":
            say.say(
                f"A wakes up (SIGCONT) and writes {late['text']!r} with token {token_a}: "
                f"REFUSED by the fence ({late['error']})"
            )
        else:
            say.say(
                f"A wakes up (SIGCONT) and writes {late['text']!r} with token {token_a}: "
                "accepted, since nothing checks tokens"
            )
        a.expect("released")
        a.finish()
        final = holds(resource)
        if fenced:
            say.say(f"the resource holds {final}: B's write is safe")
        else:
            say.say(f"the resource holds {final}: A's stale write overwrote B's (a lost update)")
    finally:
        for each in workers:
            each.kill()


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
def demo() -> int:
    """Show a paused lock holder, with and without fencing, using real processes.

    Runs in a temporary directory with its own store and resource files; takes a few seconds.
    """
    out = sys.stdout
    with tempfile.TemporaryDirectory(prefix="tenure-demo-") as tmp:
        folder = Path(tmp)
        store = f"sqlite:///{folder / 'locks.db'}"
        click.echo("tenure demo: a lock holder that pauses past its lease", file=out)
        click.echo(f"  store:    {store}", file=out)
        click.echo(f"  resource: an SQLite file in {folder}, guarded by tenure.fence", file=out)
        narrator = Narrator(out)
        narrator.title("With fencing (tenure.fence checks every write's token):")
        story(narrator, folder, store, fenced=True)
        narrator.title("Without fencing (the same story, plain writes):")
        story(narrator, folder, store, fenced=False)
        click.echo(
            "\nA lease alone cannot stop a paused holder (lock-delay covers only pauses shorter "
            "than itself); the fencing token, checked by the resource, can.",
            file=out,
        )
    return EXIT_OK


__all__ = ["demo", "worker"]
