"""One worker per partition: assignment by a group, not a lock taken per message.

Two workers join the group ``ingest`` over four partitions; the group gives each partition
exactly one owner (balanced: two each), with a fencing token per partition. A worker then
consumes its own partitions without asking anyone about each message. (Kafka's consumer groups
do the same for a topic's partitions; tenure's partitions do it for any set of items:
docs/partitions.md.)

    python examples/no_lock/partitions.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import anyio

import tenure

PARTITIONS = [f"p{n}" for n in range(4)]


async def worker(url: str, name: str, owned: dict[str, set[str]], settled: anyio.Event) -> None:
    async with (
        tenure.connect_async(url, label=name) as client,
        client.partitions("ingest", PARTITIONS, ttl=5, member=name) as member,
    ):
        async for _change in member.changes():  # granted, leaving, lost: as workers come and go
            owned[name] = set(member.owned)
            mine = [owned.get(worker, set()) for worker in ("worker-a", "worker-b")]
            if all(len(m) == 2 for m in mine) and sorted(mine[0] | mine[1]) == PARTITIONS:
                settled.set()  # every partition has exactly one owner, two each


async def main(folder: Path) -> None:
    url, owned, settled = f"sqlite:///{folder}/tenure.db", {}, anyio.Event()
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tasks:
            for name in ("worker-a", "worker-b"):
                tasks.start_soon(worker, url, name, owned, settled)
            await settled.wait()
            for name, partitions in sorted(owned.items()):
                print(f"{name} owns {', '.join(sorted(partitions))}")
            tasks.cancel_scope.cancel()  # both workers leave the group


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        anyio.run(main, Path(folder))
