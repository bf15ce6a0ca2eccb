"""The docs' store table, made from the stores' declared capabilities (never typed by hand).

python -m tenure._docs      # prints the table that README.md must contain
"""

from __future__ import annotations

from .stores._spi import Capabilities
from .stores.etcd import EtcdStore
from .stores.postgres import PostgresStore
from .stores.sqlite import SQLiteStore

STORES: list[tuple[str, str, Capabilities | None]] = [
    ("SQLite (embedded default)", "`sqlite:///path`", SQLiteStore.capabilities),
    ("etcd", "`etcd://h1:2379,h2:2379`", EtcdStore.capabilities),
    ("PostgreSQL", "`postgresql://…`", PostgresStore.capabilities),
    ("ZooKeeper", "`zookeeper://h1:2181,h2:2181`", None),
    ("Redis", "`redis://…`", None),
]

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
        if caps is None:
            cells = [name, url, "not yet", *[""] * (len(COLUMNS) - 3)]
        else:
            cells = [
                name,
                url,
                caps.grade,
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
