"""Every store tenure knows: the built-in ones, listed here, then those other packages add by
entry point (group ``tenure.stores``), read lazily and once per process. Read by URL parsing,
the docs' store table (built-ins only), the chaos harness and the conformance suite. A new
built-in store adds one entry here (and its module); a store package outside the project
registers its own `StoreEntry` by entry point (docs/stores/authors.md)."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass, replace
from typing import Literal

from .._errors import InvalidArgument

STORE_API_VERSION = 1
"""The version of the store contract (`tenure.stores`); raised when a change breaks stores
written for the previous one. A plugin's entry says which one it was written for (``api``)."""
ENTRY_POINTS = "tenure.stores"
"""The entry-point group a store package registers its `StoreEntry` under."""


@dataclass(frozen=True)
class StoreEntry:
    key: str
    """The short name: test fixtures are ``<key>_store_url``; a plugin's entry point is named so."""
    schemes: tuple[str, ...]
    """URL schemes that name it (the first is the canonical one)."""
    module: str
    """The dotted path of the module that holds the store class, imported on use: a store's
    client library is needed only by those who use that store."""
    cls: str
    label: str
    """How the docs name it."""
    url_example: str
    default_port: int | None
    """The port a URL without one means (None: not a network store)."""
    throwaway: Literal["file", "server"] | None = None
    """What ``tenure chaos --cluster <key>`` starts for a run: a file in the run's directory,
    a server (the launcher named by ``server``), or nothing (not offered)."""
    members: tuple[int, int] | None = None
    """The sizes ``--cluster <key>:N`` may ask for (None: one fixed shape)."""
    namespace: Literal["path", "schema", "prefix", "file"] = "path"
    """How a URL names a namespace of its own (tests and chaos runs each take a fresh one):
    the URL's path, its ``?schema=`` or ``?prefix=`` option, or a file of its own."""
    api: int = STORE_API_VERSION
    """The `STORE_API_VERSION` the store was written for; the registry refuses another."""
    server: str | None = None
    """The dotted path of the module that starts a throw-away server of the store on loopback
    (its launcher, beside the store: ``tenure.stores.etcd.server``), imported on use. It
    defines ``launch(members: int | None) -> ServerControl`` (`tenure.stores._server`); ``tenure
    chaos --cluster``, ``tenure dev-cluster`` and the drill find servers here. None: none."""
    dist: str | None = None
    """The distribution whose entry point registered it (set by the registry; None: built in)."""

    def namespaced(self, url: str, name: str) -> str:
        """``url`` (a server's, without a namespace) with namespace ``name``; for a file
        store, ``url`` is the directory's URL and ``name`` the file."""
        if self.namespace == "path":
            return f"{url.rstrip('/')}/{name}"
        if self.namespace == "file":
            return f"{url.rstrip('/')}/{name}.db"
        joiner = "&" if "?" in url else "?"
        return f"{url}{joiner}{self.namespace}={name}"


REGISTRY: tuple[StoreEntry, ...] = (  # the built-in stores
    StoreEntry(
        "sqlite", ("sqlite",), "tenure.stores.sqlite", "SQLiteStore",
        "SQLite (embedded default)", "sqlite:///path", None, throwaway="file", namespace="file",
    ),
    StoreEntry(
        "etcd", ("etcd",), "tenure.stores.etcd", "EtcdStore",
        "etcd", "etcd://h1:2379,h2:2379", 2379,
        throwaway="server", members=(1, 7), server="tenure.stores.etcd.server",
    ),
    StoreEntry(
        "postgres", ("postgresql", "postgres"), "tenure.stores.postgres", "PostgresStore",
        "PostgreSQL", "postgresql://…", 5432, throwaway="server", namespace="schema",
        server="tenure.stores.postgres.server",
    ),
    StoreEntry(
        "zookeeper", ("zookeeper",), "tenure.stores.zookeeper", "ZooKeeperStore",
        "ZooKeeper", "zookeeper://h1:2181,h2:2181/chroot", 2181,
        throwaway="server", members=(1, 7), server="tenure.stores.zookeeper.server",
    ),
    StoreEntry(
        "redis", ("redis", "rediss"), "tenure.stores.redis", "RedisStore",
        "Redis (one instance)", "redis://host:6379/0", 6379, throwaway="server",
        namespace="prefix", server="tenure.stores.redis.server",
    ),
    StoreEntry(
        "redlock", ("redlock",), "tenure.stores.redis", "RedlockStore",
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
# The four above are the built-in stores only (the docs' table, chaos runs and their guards
# know nothing of a plugin's servers); `entries`, `by_scheme` and `by_key` add the plugins.

_scanned: tuple[StoreEntry, ...] | InvalidArgument | None = None
"""The outcome of the one entry-point scan: the plugins' entries, or why they were refused (a
broken plugin is refused again at every read, without another scan)."""


def entries() -> tuple[StoreEntry, ...]:
    """Every store: the built-in ones, then the plugins' (by distribution and entry point
    name). The first call scans the entry points; one that is broken, reuses a key or a scheme,
    or was written for another `STORE_API_VERSION` is refused, here, in one line."""
    global _scanned
    if _scanned is None:
        try:
            _scanned = _plugins()
        except InvalidArgument as exc:
            _scanned = exc
    if isinstance(_scanned, InvalidArgument):
        raise InvalidArgument(str(_scanned))  # a fresh error each time: no shared traceback
    return REGISTRY + _scanned


def by_scheme() -> dict[str, StoreEntry]:
    return {scheme: entry for entry in entries() for scheme in entry.schemes}


def by_key() -> dict[str, StoreEntry]:
    return {entry.key: entry for entry in entries()}


def forget_plugins() -> None:
    """Scan the entry points again at the next read (for tests that install a plugin)."""
    global _scanned
    _scanned = None


def _plugins() -> tuple[StoreEntry, ...]:
    found: list[StoreEntry] = []
    keys, schemes = dict(BY_KEY), dict(BY_SCHEME)
    points = importlib.metadata.entry_points(group=ENTRY_POINTS)
    for point in sorted(points, key=lambda p: (_dist(p) or "", p.name)):
        entry = _load(point)
        claims = [(keys.get(entry.key), f"key {entry.key!r}")]
        claims += [(schemes.get(scheme), f"scheme {scheme!r}") for scheme in entry.schemes]
        for taken, what in claims:
            if taken is not None:
                # Between two plugins the later (by distribution) is named: both are shown.
                owner = f"the {taken.dist} plugin" if taken.dist else "a built-in store"
                raise _refused(point, f"its {what} is already {owner}'s")
        keys[entry.key] = entry
        schemes.update(dict.fromkeys(entry.schemes, entry))
        found.append(entry)
    return tuple(found)


def _load(point: importlib.metadata.EntryPoint) -> StoreEntry:
    try:
        entry = point.load()
    except Exception as exc:  # anything its import raises: the plugin is broken, not tenure
        raise _refused(point, f"cannot load {point.value}: {type(exc).__name__}: {exc}") from None
    if not isinstance(entry, StoreEntry):
        raise _refused(point, f"{point.value} is a {type(entry).__name__}, not a StoreEntry")
    if entry.api != STORE_API_VERSION:
        raise _refused(
            point,
            f"written for store API {entry.api}, this tenure has {STORE_API_VERSION}",
        )
    if entry.key != point.name or not entry.schemes:
        raise _refused(point, f"its entry must be named by its key ({entry.key!r}), with a scheme")
    if entry.throwaway == "server" and not entry.server:
        raise _refused(point, "its throwaway is 'server' but it names no server launcher")
    return replace(entry, dist=_dist(point))


def _refused(point: importlib.metadata.EntryPoint, why: str) -> InvalidArgument:
    where = f" from {_dist(point)}" if _dist(point) else ""
    line = " ".join(f"store plugin {point.name!r}{where} refused: {why}".split())
    return InvalidArgument(line[:400])


def _dist(point: importlib.metadata.EntryPoint) -> str | None:
    dist = getattr(point, "dist", None)  # Python 3.10+: the distribution that declared it
    return None if dist is None else str(dist.name)
