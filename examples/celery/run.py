"""Celery beat on three nodes, one ticking, the leader killed: ``python examples/celery/run.py``.

Starts a Redis broker (``redis-server``, on a free loopback port, in a temporary directory), a
worker and three beat processes running ``tenure.celery.LeaderScheduler`` against the embedded
store, lets the leader tick every second, SIGKILLs it, and prints each fire time with the term
that sent it: the next beat takes over after the dead one's term ends, sends the fire times
missed meanwhile, and none runs twice. Needs ``pip install 'tenure[celery]' redis``.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import tenure
from tenure.stores.redis.server import RedisServer
from tenure_tools.celery_nodes import CeleryNodes, fail_over, read_ticks, wait_until

HERE = Path(__file__).parent
ELECTION = "celery-beat:celery_example"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, RedisServer() as broker:
        root, store = Path(tmp), f"sqlite:///{tmp}/store.db"
        out = root / "ticks"
        out.touch()
        env = {
            "CELERY_BROKER_URL": f"redis://{broker.endpoint}/0",
            "TENURE_STORE": store,
            "OUT": str(out),
            "BEAT_TTL": "2",
        }
        with (
            CeleryNodes("celery_example", HERE, root, env) as nodes,
            tenure.connect(store) as client,
        ):
            nodes.worker("worker")
            for i in range(3):
                nodes.beat(f"beat-{i}")
            wait_until(lambda: len(read_ticks(out)) >= 4, 60.0, "four ticks")
            killed = fail_over(nodes, client, ELECTION, out)
            wait_until(
                lambda: (
                    read_ticks(out)[-1].term == killed.term
                    and sum(t.term == killed.term for t in read_ticks(out)) >= 6
                ),
                60.0,
                "six more",
            )
            ticks = read_ticks(out)
            history = client.history(f"{ELECTION}/tick")
        print("fire time     term  ran")
        for tick in ticks:
            assert tick.slot is not None  # sent by LeaderScheduler
            late = tick.ran - tick.slot.timestamp()
            print(f"{tick.slot:%H:%M:%S}      {tick.term:<4}  {late:+.2f} s")
        twice = [slot for slot, n in Counter(t.slot for t in ticks).items() if n > 1]
        print(
            f"{killed.killed} led and was killed; {killed.successor} took over as term"
            f" {killed.term}, its first tick ran {killed.gap:.1f} s after the kill"
        )
        again = sum(slot.attempts > 1 for slot in history)  # killed between send and record
        print(f"fire times recorded in the store: {len(history)}, sent again after a kill: {again}")
        print(f"fire times run twice: {len(twice)}")


if __name__ == "__main__":
    main()
