"""Stop taking new work when the lease is at risk; be done by ``stop_by``.

A worker thread processes jobs under a lock. Halfway through, the store stops answering
renewals (simulated with ``tenure.testing.FaultyStore``, as a partition would). The lease says
it is at risk a third of a TTL before its deadline: the worker takes no new job, finishes the
one it has only if it fits before ``stop_by``, and is done before the store could grant the lock
to anyone else. Run it: ``python examples/stop_by.py`` (the embedded store, in a temp dir).
"""

from __future__ import annotations

import queue
import tempfile
import threading
import time
from pathlib import Path

import tenure
from tenure.testing import FaultyStore

JOB_SECONDS = 0.3


def work(lease: tenure.Lease, jobs: queue.Queue[int], log: list[str]) -> None:
    while not lease.at_risk:  # stop taking new work once renewals are overdue
        try:
            job = jobs.get(timeout=0.05)
        except queue.Empty:
            continue
        if lease.clock.now() + JOB_SECONDS >= lease.stop_by:  # it would not be done in time
            jobs.put(job)
            break
        time.sleep(JOB_SECONDS)  # the job itself; send lease.token with its writes
        log.append(f"job {job} done with token {lease.token}, {lease.remaining():.2f}s left")
    log.append(f"stopped taking work: at risk, {lease.stop_by - lease.clock.now():.2f}s to spare")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = FaultyStore.from_url(f"sqlite:///{Path(tmp) / 'locks.db'}")
        client = tenure.Client(store)
        try:
            jobs: queue.Queue[int] = queue.Queue()
            for job in range(100):
                jobs.put(job)
            log: list[str] = []
            lease = client.lock("batch", ttl=3).acquire()
            lease.on_at_risk(lambda _: log.append("the lease says: renewals are overdue"))
            worker = threading.Thread(target=work, args=(lease, jobs, log))
            worker.start()
            time.sleep(1.5)
            store.fail_keep_alive = True  # the store stops answering renewals
            worker.join()
            done_at = lease.clock.now()
            print("\n".join(log))
            print(f"worker done {lease.stop_by - done_at:.2f}s before stop_by")
            while not lease.lost:
                time.sleep(0.05)
            print(f"lease lost at its deadline: {lease.lost_reason}")
        finally:
            client.close()


if __name__ == "__main__":
    main()
