"""Every store tenure knows, once: read by URL parsing, the docs' store table, the chaos harness
and the conformance suite. A new store adds one entry here (and its module)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


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
    throwaway: Literal["file", "server"] | None = None
    """What ``tenure chaos --cluster <key>`` starts for a run: a file in the run's directory,
    a server (``tenure.testing.chaos.servers.launch``), or nothing (not offered)."""
    members: tuple[int, int] | None = None
    """The sizes ``--cluster <key>:N`` may ask for (None: one fixed shape)."""
    namespace: Literal["path", "schema", "prefix", "file"] = "path"
    """How a URL names a namespace of its own (tests and chaos runs each take a fresh one):
    the URL's path, its ``?schema=`` or ``?prefix=`` option, or a file of its own."""

    def namespaced(self, url: str, name: str) -> str:
        """``url`` (a server's, without a namespace) with namespace ``name``; for a file
        store, ``url`` is the directory's URL and ``name`` the file."""
        if self.namespace == "path":
            return f"{url.rstrip('/')}/{name}"
        if self.namespace == "file":
            return f"{url.rstrip('/')}/{name}.db"
        joiner = "&" if "?" in url else "?"
        return f"{url}{joiner}{self.namespace}={name}"


REGISTRY: tuple[StoreEntry, ...] = (
    StoreEntry(
        "sqlite", ("sqlite",), "sqlite", "SQLiteStore",
        "SQLite (embedded default)", "sqlite:///path", None, throwaway="file", namespace="file",
    ),
    StoreEntry(
        "etcd", ("etcd",), "etcd", "EtcdStore", "etcd", "etcd://h1:2379,h2:2379", 2379,
        throwaway="server", members=(1, 7),
    ),
    StoreEntry(
        "postgres", ("postgresql", "postgres"), "postgres", "PostgresStore",
        "PostgreSQL", "postgresql://…", 5432, throwaway="server", namespace="schema",
    ),
    StoreEntry(
        "zookeeper", ("zookeeper",), "zookeeper", "ZooKeeperStore",
        "ZooKeeper", "zookeeper://h1:2181,h2:2181/chroot", 2181,
        throwaway="server", members=(1, 7),
    ),
    StoreEntry(
        "redis", ("redis", "rediss"), "redis", "RedisStore",
        "Redis (one instance)", "redis://host:6379/0", 6379, throwaway="server",
        namespace="prefix",
    ),
    StoreEntry(
        "redlock", ("redlock",), "redis", "RedlockStore",
        "Redis (Redlock)", "redlock://h1:6379,h2:6379,h3:6379", 6379, namespace="prefix",
    ),
)  # fmt: skip

BY_SCHEME: dict[str, StoreEntry] = {scheme: entry for entry in REGISTRY for scheme in entry.schemes}
DEFAULT_PORTS: dict[str, int] = {
    scheme: entry.default_port
    for scheme, entry in BY_SCHEME.items()
    if entry.default_port is not None
}
BY_KEY: dict[str, StoreEntry] = {entry.key: entry for entry in REGISTRY}
