"""One replica of an app whose APScheduler job must run once per fire time across replicas.

Every replica schedules the same job; `tenure.apscheduler.OncePerFireTime` lets the first
replica to claim a fire time run it and the others skip it (they log who ran it). Started by
``run.py`` in this folder; alone: ``TENURE_STORE=sqlite:///shared.db python app.py``.
"""

from __future__ import annotations

import logging
import os
import sys
import time

from apscheduler.schedulers.background import BackgroundScheduler

import tenure
from tenure.apscheduler import OncePerFireTime

REPLICA = os.environ.get("REPLICA", f"pid-{os.getpid()}")
logging.basicConfig(stream=sys.stderr, format=f"{REPLICA}: %(message)s")
logging.getLogger("tenure.apscheduler").setLevel(logging.INFO)  # "not run here, done by …"

client = tenure.connect(label=REPLICA)  # $TENURE_STORE, else the embedded store
guard = OncePerFireTime(client, ttl=30)
scheduler = BackgroundScheduler(executors={"default": guard}, timezone="UTC")


@scheduler.scheduled_job("cron", second="*", id="report")
def report() -> None:
    (run,) = guard.runs("report")  # this fire time's claim: token, attempt, lease
    time.sleep(0.2)  # the work; send run.token with each write to a fenced resource
    run.lease.check()  # still ours (LeaseLost otherwise) before the result counts
    fire = run.record.slot if run.record else "?"
    print(f"{REPLICA} ran {fire} (token {run.token}, attempt {run.attempt})", flush=True)


if __name__ == "__main__":
    scheduler.start()
    time.sleep(float(os.environ.get("RUN_FOR", "3600")))
    scheduler.shutdown()  # waits for the job in hand; its end is recorded
    client.close()
