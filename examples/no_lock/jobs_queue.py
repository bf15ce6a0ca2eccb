"""Processing each job once: a queue with a visibility timeout, and an idempotent handler.

A worker that receives a job hides it for a while (the visibility timeout) instead of locking
it; it deletes the job when done (the ack). A worker that dies before its ack leaves the job to
reappear and be received again: delivery is at least once. The handler is made idempotent by
the job's id (``@client.idempotent``), so the second delivery replays the first one's outcome
instead of sending the email again.

    python examples/no_lock/jobs_queue.py
"""

from __future__ import annotations

import sqlite3
import tempfile
import time
from pathlib import Path

import tenure

NOW = "((julianday('now') - 2440587.5) * 86400.0)"  # the database's clock, in seconds
VISIBILITY = 0.5  # seconds a received job stays hidden from other workers
sent: list[str] = []


def receive(queue: sqlite3.Connection) -> tuple[int, str] | None:
    """Take the next visible job and hide it for VISIBILITY seconds, in one statement."""
    row = queue.execute(
        f"UPDATE jobs SET visible_at = {NOW} + ? WHERE id = (SELECT id FROM jobs"
        f" WHERE visible_at <= {NOW} ORDER BY id LIMIT 1) RETURNING id, body",
        (VISIBILITY,),
    ).fetchone()
    return None if row is None else (row[0], row[1])


def main(folder: Path) -> None:
    queue = sqlite3.connect(folder / "queue.db", isolation_level=None)
    queue.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, body TEXT, visible_at REAL)")
    queue.execute("INSERT INTO jobs (body, visible_at) VALUES ('welcome ada', 0)")
    with tenure.connect(f"sqlite:///{folder}/tenure.db") as client:

        @client.idempotent("emails", key=lambda job_id, body: str(job_id))
        def send_email(job_id: int, body: str) -> str:
            sent.append(body)
            return f"sent {body!r}"

        job = receive(queue)
        assert job is not None
        print(f"worker 1: job {job[0]}: {send_email(*job)}; dies before its ack")
        print(f"worker 2: sees {receive(queue)} while the job is hidden")
        time.sleep(VISIBILITY + 0.2)
        again = receive(queue)  # the visibility timeout passed: delivered again
        assert again is not None
        print(f"worker 2: job {again[0]} again: {send_email(*again)} (replayed); acks it")
        queue.execute("DELETE FROM jobs WHERE id = ?", (again[0],))
    (left,) = queue.execute("SELECT count(*) FROM jobs").fetchone()
    print(f"emails sent: {len(sent)}; jobs left: {left}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        main(Path(folder))
