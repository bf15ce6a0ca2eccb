"""The docs' store table, made from the stores' declared capabilities (never typed by hand).

python -m tenure._docs      # prints the table that README.md must contain
"""

from __future__ import annotations

from .stores._spi import Capabilities
from .stores.etcd import EtcdStore
from .stores.postgres import PostgresStore
from .stores.redis import RedisStore
from .stores.redlock import RedlockStore
from .stores.sqlite import SQLiteStore
from .stores.zookeeper import ZooKeeperStore

STORES: list[tuple[str, str, Capabilities]] = [
    ("SQLite (embedded default)", "`sqlite:///path`", SQLiteStore.capabilities),
    ("etcd", "`etcd://h1:2379,h2:2379`", EtcdStore.capabilities),
    ("PostgreSQL", "`postgresql://…`", PostgresStore.capabilities),
    ("ZooKeeper", "`zookeeper://h1:2181,h2:2181/chroot`", ZooKeeperStore.capabilities),
    ("Redis (one instance)", "`redis://host:6379/0`", RedisStore.capabilities),
    ("Redis (Redlock)", "`redlock://h1:6379,h2:6379,h3:6379`", RedlockStore.capabilities),
]
EFFICIENCY = "**efficiency**: avoids duplicate work, not for correctness"

COLUMNS = (
    "store",
    "URL",
    "grade",
    "machines",
    "durable tokens",
    "store judges expiry",
    "FIFO waiters",
    "woken by the store",
)


def _yes(flag: bool) -> str:
    return "yes" if flag else "**no**"


def store_table() -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for name, url, caps in STORES:
        cells = [
            name,
            url,
            caps.grade if caps.grade == "correctness" else EFFICIENCY,
            caps.machines,
            _yes(caps.durable_tokens),
            _yes(caps.store_judges_expiry),
            _yes(caps.fair),
            _yes(caps.native_wait),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(store_table())
