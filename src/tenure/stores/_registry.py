"""Every store tenure knows, once: read by URL parsing, the docs' store table, the chaos harness
and the conformance suite. A new store adds one entry here (and its module)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StoreEntry:
    key: str
    """The short name: test fixtures are ``<key>_store_url``."""
    schemes: tuple[str, ...]
    """URL schemes that name it (the first is the canonical one)."""
    module: str
    """Its module under ``tenure.stores``, imported on use: a store's client library is needed
    only by those who use that store."""
    cls: str
    label: str
    """How the docs name it."""
    url_example: str
    default_port: int | None
    """The port a URL without one means (None: not a network store)."""


REGISTRY: tuple[StoreEntry, ...] = (
    StoreEntry(
        "sqlite", ("sqlite",), "sqlite", "SQLiteStore",
        "SQLite (embedded default)", "sqlite:///path", None,
    ),
    StoreEntry("etcd", ("etcd",), "etcd", "EtcdStore", "etcd", "etcd://h1:2379,h2:2379", 2379),
    StoreEntry(
        "postgres", ("postgresql", "postgres"), "postgres", "PostgresStore",
        "PostgreSQL", "postgresql://…", 5432,
    ),
    StoreEntry(
        "zookeeper", ("zookeeper",), "zookeeper", "ZooKeeperStore",
        "ZooKeeper", "zookeeper://h1:2181,h2:2181/chroot", 2181,
    ),
    StoreEntry(
        "redis", ("redis", "rediss"), "redis", "RedisStore",
        "Redis (one instance)", "redis://host:6379/0", 6379,
    ),
    StoreEntry(
        "redlock", ("redlock",), "redis", "RedlockStore",
        "Redis (Redlock)", "redlock://h1:6379,h2:6379,h3:6379", 6379,
    ),
)  # fmt: skip

BY_SCHEME: dict[str, StoreEntry] = {scheme: entry for entry in REGISTRY for scheme in entry.schemes}
DEFAULT_PORTS: dict[str, int] = {
    scheme: entry.default_port
    for scheme, entry in BY_SCHEME.items()
    if entry.default_port is not None
}
