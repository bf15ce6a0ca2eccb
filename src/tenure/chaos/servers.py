"""Store servers a chaos run can fault: the same few switches (`ServerControl`) over an etcd
cluster, a ZooKeeper ensemble, a PostgreSQL server or a Redis primary with its replica, started
by the harness (or a test fixture). Each lives beside its store (``tenure.stores.<store>.server``)
and is found through the store registry (`StoreEntry.server`)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..stores import by_key
from ..stores._server import Member, ServerControl
from ..stores._server import launch as launch_entry

if TYPE_CHECKING:
    from ..stores.etcd.server import EtcdControl
    from ..stores.postgres.server import PostgresControl
    from ..stores.redis.server import RedisControl
    from ..stores.zookeeper.server import ZooKeeperControl

__all__ = [
    "EtcdControl",
    "Member",
    "PostgresControl",
    "RedisControl",
    "ServerControl",
    "ZooKeeperControl",
    "launch",
]
_CONTROLS = {
    "EtcdControl": "etcd",
    "PostgresControl": "postgres",
    "RedisControl": "redis",
    "ZooKeeperControl": "zookeeper",
}


def __getattr__(name: str) -> Any:
    """Each store's control, imported on first use: a launcher's module is its store's, whose
    package imports the store's client library (an extra), so a run imports only its own."""
    if name in _CONTROLS:
        module = importlib.import_module(f"tenure.stores.{_CONTROLS[name]}.server")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def launch(key: str, members: int | None = None) -> ServerControl:
    """A throw-away server (not started yet) for the store of registry key ``key``: what its
    entry's launcher (``server``) makes — etcd and ZooKeeper with ``members`` (default 3),
    PostgreSQL, Redis with its replica."""
    entry = by_key().get(key)
    if entry is None or entry.server is None:
        raise ValueError(f"no throw-away server for the {key} store")
    return launch_entry(entry, members)
