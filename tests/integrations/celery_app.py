"""The Celery app the Celery tests run in real workers and beat processes, set by environment:
CELERY_BROKER_URL and CELERY_RESULT_BACKEND (a Redis), TENURE_STORE, OUT (a file each task run
appends one line to), TICK_EVERY (seconds) and BEAT_TTL."""

from __future__ import annotations

import os
import time

from celery import Celery

from tenure.celery import ExclusiveTask, current_lease

TICK_EVERY = float(os.environ.get("TICK_EVERY", "1"))
app = Celery("celery_app")
app.conf.update(
    beat_schedule={
        "tick": {"task": "celery_app.tick", "schedule": float(os.environ.get("TICK_EVERY", "1"))}
    },
    tenure_beat_ttl=float(os.environ.get("BEAT_TTL", "2")),
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


def note(line: str) -> None:
    """One line, one write: lines from every worker interleave whole."""
    fd = os.open(os.environ["OUT"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


@app.task(bind=True)
def tick(self) -> None:  # type: ignore[no-untyped-def]
    slot = self.request.get("tenure_slot") or "-"
    term = self.request.get("tenure_term") or 0
    note(f"tick {slot} {term} {time.time():.3f}")


@app.task(base=ExclusiveTask, lock_key="{0}", lock_scope="guarded", lock_ttl=1.0)
def guarded(key: str, seconds: float) -> int:
    note(f"start {key} {os.getpid()} {time.time():.3f}")
    time.sleep(seconds)
    token = current_lease().token
    note(f"end {key} {os.getpid()} {token}")
    return int(token)


@app.task(
    bind=True,
    base=ExclusiveTask,
    lock_key="{0}",
    lock_scope="guarded",  # the same keys as guarded's
    lock_ttl=1.0,
    on_busy="retry",
    busy_retry_delay=0.3,
    max_retries=100,
)
def guarded_retry(self, key: str) -> int:  # type: ignore[no-untyped-def]
    note(f"start {key} {os.getpid()} {time.time():.3f} {self.request.retries}")
    return int(current_lease().token)
