"""The example's Celery app — also what the tests and the fail-over benchmark run in real
workers and beats. Set by environment: CELERY_BROKER_URL and CELERY_RESULT_BACKEND (a Redis),
TENURE_STORE (default: the embedded store), OUT (the file each task appends one line to),
TICK_EVERY (seconds, default 1) and BEAT_TTL (seconds, default 2)."""

from __future__ import annotations

import os
import time

from celery import Celery

from tenure.celery import ExclusiveTask, current_lease

app = Celery("celery_example")
app.conf.update(
    beat_schedule={
        "tick": {
            "task": "celery_example.tick",
            "schedule": float(os.environ.get("TICK_EVERY", "1")),
        }
    },
    tenure_beat_ttl=float(os.environ.get("BEAT_TTL", "2")),
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


def note(line: str) -> None:
    """One line, one write: the lines of every worker interleave whole."""
    fd = os.open(os.environ["OUT"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


@app.task(bind=True)
def tick(self) -> None:  # type: ignore[no-untyped-def]
    """Sent by beat: which fire time, by which leader's term, run when."""
    slot = self.request.get("tenure_slot") or "-"
    term = self.request.get("tenure_term") or 0
    note(f"tick {slot} {term} {time.time():.3f}")


@app.task(base=ExclusiveTask, lock_key="{0}", lock_scope="accounts", lock_ttl=1.0)
def sync_account(account: str, seconds: float) -> int:
    """One call per account at a time; a call that finds it busy ends SKIPPED."""
    note(f"start {account} {os.getpid()} {time.time():.3f}")
    time.sleep(seconds)
    token = current_lease().token
    note(f"end {account} {os.getpid()} {token}")
    return int(token)


@app.task(
    bind=True,
    base=ExclusiveTask,
    lock_key="{0}",
    lock_scope="accounts",  # the same keys as sync_account's
    lock_ttl=1.0,
    on_busy="retry",
    busy_retry_delay=0.3,
    max_retries=100,
)
def sync_account_later(self, account: str) -> int:  # type: ignore[no-untyped-def]
    """The same lock, but a busy call retries until the account is free."""
    note(f"start {account} {os.getpid()} {time.time():.3f} {self.request.retries}")
    return int(current_lease().token)
