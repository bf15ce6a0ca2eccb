"""A worker of the counter workload: take the lock, read, wait, write value+1, release.

python -m tenure.testing.workloads.counter STORE_URL RESOURCE_DB fenced|unfenced SECONDS TTL

With ``fenced`` every access to the resource admits the lease's token first (reads too, so a
newer holder's read shuts out an older holder's write); ``unfenced`` trusts the lock alone. The
resource records every write it accepts, with the token and the value it replaced; the checker
reads that log.
"""

from __future__ import annotations

import os
import random
import sqlite3
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import tenure
from tenure.fence import SQLFence


def main() -> None:
    store_url, resource, mode, seconds, ttl = sys.argv[1:6]
    fenced = mode == "fenced"
    client = tenure.connect(store_url, label=f"counter-worker {mode}")
    db = sqlite3.connect(resource, isolation_level=None, timeout=60)
    fence = SQLFence()
    end = time.monotonic() + float(seconds)

    @contextmanager
    def access(token: int) -> Iterator[sqlite3.Cursor]:
        if fenced:
            with fence.fenced(db, "counter", token) as cur:
                yield cur
        else:
            cur = db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise

    while time.monotonic() < end:
        try:
            with client.lock("counter", ttl=float(ttl)) as lease:
                with access(lease.token) as cur:
                    (value,) = cur.execute("SELECT value FROM counter").fetchone()
                time.sleep(random.uniform(0.05, 0.25))  # work between read and write
                with access(lease.token) as cur:
                    cur.execute("UPDATE counter SET value = ?", (value + 1,))
                    cur.execute(
                        "INSERT INTO accepted (token, pid, old, new) VALUES (?, ?, ?, ?)",
                        (lease.token, os.getpid(), value, value + 1),
                    )
                print(f"ok {lease.token} {value + 1}", flush=True)
        except tenure.StaleToken as exc:
            print(f"refused {exc.token}", flush=True)
        except tenure.LeaseLost:
            print("lost", flush=True)
    client.close()


if __name__ == "__main__":
    main()
