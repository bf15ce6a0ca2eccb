"""One worker of the lose-servers drill (`tenure_tools.drill`): a member of the partition group
that processes the requests of the partitions it owns, from the shared queue in PostgreSQL.

``python -m tenure_tools.drill_worker --server 3 --store URL --dsn DSN --partitions 64
--capacity 10 --deadline 2 --ttl 2 --history server-3.jsonl --ready server-3.ready``

It takes the oldest pending request of an owned partition that is still within its deadline
(older ones are errors already: working on them would only make newer ones late too) — at
most ``capacity`` a second — and marks it done in one transaction with the partition's fence
(`tenure.fence.SQLFence`, resource = the partition) and the ``accepted`` log the drill's
stale-write check reads. Ownership goes into the history as the chaos worker's does
(`chaos.ownership`), each write with the lease's deadline, so the drill's item-overlap check
reads it as the chaos checkers do. It runs until killed (SIGTERM: leaves the group first).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

import tenure
from tenure.chaos.history import Recorder
from tenure.chaos.ownership import Ownership, one_line
from tenure.fence import SQLFence

GROUP = "drill"
IDLE = 0.05
"""Seconds between looks at the queue while nothing waits: ≤ 50 ms added to a request
that comes to an idle worker, and 20 queries a second instead of a hundred."""
PG_OPTIONS = "-c idle_in_transaction_session_timeout=1000 -c lock_timeout=1000"
PG_LINK = {"connect_timeout": 2, "tcp_user_timeout": 1000, "keepalives_idle": 1,
           "keepalives_interval": 1, "keepalives_count": 2}  # fmt: skip
"""A query sent into a blackhole fails within a second (``tcp_user_timeout``), and so does an
answer that never comes (keep-alives), instead of waiting out TCP's back-off after a cut heals:
the worker is stuck in one query meanwhile, every partition it owns with it."""
FENCE = SQLFence("drill_fence")
TAKE = """
    SELECT id, partition FROM requests
    WHERE done IS NULL AND partition = ANY(%s) AND created > clock_timestamp() - %s * interval '1 s'
    ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED
"""
DONE = "UPDATE requests SET done = clock_timestamp(), worker = %s, token = %s WHERE id = %s"
LOG = "INSERT INTO accepted (partition, token, worker, request) VALUES (%s, %s, %s, %s)"


def partitions(count: int) -> list[str]:
    return [f"p{n:02d}" for n in range(count)]


def member_id(server: int) -> str:
    return f"server-{server}"


class DrillWorker:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.name = member_id(args.server)
        self.rec = Recorder(args.history, self.name)
        self.own = Ownership(self.rec)
        self.conn: psycopg.Connection[Any] | None = None
        self.free_at = 0.0  # when the next request may be taken up (host monotonic)

    def run(self) -> None:
        self.rec.record("start", "info")
        with (
            tenure.connect(self.args.store, label=f"drill {self.name}") as client,
            client.partitions(
                GROUP,
                partitions(self.args.partitions),
                self.args.ttl,
                member=self.name,
                lock_delay=self.args.lock_delay,
            ) as member,
        ):
            threading.Thread(target=self.own.consume, args=(member,), daemon=True).start()
            Path(self.args.ready).touch()
            try:
                while True:
                    if not self.step():
                        time.sleep(IDLE)
            finally:
                self.own.let_go()

    def connection(self) -> psycopg.Connection[Any]:
        if self.conn is None or self.conn.closed:
            # A worker cut off mid-transaction holds its partition's fence row: the server ends
            # such a transaction after a second idle, and nobody waits for a row lock longer.
            self.conn = psycopg.connect(make_conninfo(self.args.dsn, options=PG_OPTIONS, **PG_LINK))
        return self.conn

    def step(self) -> bool:
        """Process one request, if one of an owned partition is waiting; False if none was."""
        owned = [item for item, lease in list(self.own.items.items()) if lease.remaining() > 0]
        if not owned:
            return False
        try:
            return self.process(owned)
        except tenure.StaleToken:
            return True  # recorded, rolled back: a newer owner wrote since
        except (psycopg.Error, OSError) as exc:
            self.rec.record("queue", "info", error=one_line(exc))
            if self.conn is not None:
                self.conn.close()
            time.sleep(0.1)
            return False

    def process(self, owned: list[str]) -> bool:
        """Take the oldest waiting request of ``owned``, work on it, and commit it as done
        under the partition's fence — all while its item is held, so the commit comes before
        the item can be let go."""
        # Capacity: a request is taken up at most every 1/capacity seconds, whatever its own
        # round trips cost (they are its work); waited out before anything is held.
        time.sleep(max(0.0, self.free_at - time.monotonic()))
        conn = self.connection()
        try:
            with conn.cursor() as cur:
                row = cur.execute(TAKE, (owned, self.args.deadline)).fetchone()
                if row is None:
                    conn.rollback()
                    return False
                request, item = row
                with self.own.holding(item) as lease:
                    if lease is None or not lease.remaining():
                        conn.rollback()  # given up since it was read: leave the request be
                        return False
                    self.free_at = time.monotonic() + 1 / self.args.capacity
                    value = self.own.with_deadline(lease, {"item": item, "request": request})
                    self.rec.record("write", "invoke", token=lease.token, value=value)
                    try:
                        FENCE.admit(cur, item, lease.token)
                    except tenure.StaleToken:
                        self.rec.record("write", "fail", token=lease.token, error="stale")
                        raise
                    cur.execute(DONE, (self.args.server, lease.token, request))
                    cur.execute(LOG, (item, lease.token, self.args.server, request))
                    conn.commit()
                    self.rec.record("write", "ok", token=lease.token, value={"item": item})
        except BaseException:
            with contextlib.suppress(psycopg.Error):
                conn.rollback()
            raise
        return True


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tenure_tools.drill_worker")
    parser.add_argument("--server", type=int, required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--capacity", type=float, default=10.0)
    parser.add_argument("--deadline", type=float, default=2.0)
    parser.add_argument("--ttl", type=float, default=2.0)
    parser.add_argument("--lock-delay", type=float, default=None)
    parser.add_argument("--history", required=True)
    parser.add_argument("--ready", required=True)
    return parser.parse_args(argv)


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> None:
    signal.signal(signal.SIGTERM, _terminate)
    logging.basicConfig(level=logging.INFO, format="%(relativeCreated)d %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    DrillWorker(parse(argv)).run()


if __name__ == "__main__":
    main()
