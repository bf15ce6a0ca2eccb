"""One replica of an app with an APScheduler 3 job, for tests/integrations/test_apscheduler.py.

A ``BackgroundScheduler`` fires job ``tick`` every second (a cron trigger) and prints "ready"
once started. Each run appends ``start <fire time> <pid>`` and, ``JOB_SECONDS`` later,
``end <fire time> <pid>`` to ``OUT`` (one ``O_APPEND`` write per line: lines from several
processes never mix). ``GUARD=1`` runs the job through `tenure.apscheduler.OncePerFireTime` on
``STORE``; ``GUARD=0`` is the same app with APScheduler's plain thread pool (the positive
control). SIGTERM shuts the scheduler down, waiting for a job in hand.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from datetime import datetime, timezone

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

import tenure
from tenure.apscheduler import OncePerFireTime


def main() -> None:
    out = os.open(os.environ["OUT"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    seconds = float(os.environ.get("JOB_SECONDS", "0"))
    client = tenure.connect(os.environ["STORE"], label=os.environ.get("REPLICA", ""))
    guard = None
    if os.environ.get("GUARD", "1") == "1":
        guard = OncePerFireTime(client, ttl=float(os.environ.get("TTL", "30")))
    scheduler = BackgroundScheduler(
        executors={"default": guard or ThreadPoolExecutor()},
        job_defaults={"misfire_grace_time": 10},  # a loaded test machine is not a misfire
        timezone="UTC",
    )

    def tick() -> None:
        if guard is not None:
            (run,) = guard.runs("tick")  # this run's claim: its slot is the fire time
            fire = run.record.slot if run.record else "?"
        else:  # the scheduler fires at or just after the whole second
            fire = datetime.fromtimestamp(int(time.time()), timezone.utc).isoformat()
        os.write(out, f"start {fire} {os.getpid()}\n".encode())
        time.sleep(seconds)
        os.write(out, f"end {fire} {os.getpid()}\n".encode())

    scheduler.add_job(tick, "cron", second="*", id="tick")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    scheduler.start()
    print("ready", flush=True)
    stop.wait()
    scheduler.shutdown(wait=True)
    client.close()


if __name__ == "__main__":
    main()
