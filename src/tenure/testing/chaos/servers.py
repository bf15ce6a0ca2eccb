"""Store servers a chaos run can fault: the same few switches over an etcd cluster or a
PostgreSQL server that the harness (or a test fixture) started."""

from __future__ import annotations

from typing import Protocol

from ..etcd_cluster import EtcdCluster, EtcdMember
from ..postgres_server import PostgresServer


class Member(Protocol):
    name: str

    def kill(self) -> None: ...
    def start(self) -> None: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...


class ServerControl(Protocol):
    @property
    def url(self) -> str: ...

    def start(self) -> None: ...
    def leader(self) -> Member: ...
    def majority(self) -> list[Member]: ...
    def restart(self) -> None: ...
    def heal(self) -> None: ...
    def close(self) -> None: ...


class EtcdControl:
    def __init__(self, cluster: EtcdCluster, owned: bool = False) -> None:
        self.cluster = cluster
        self.owned = owned

    @property
    def url(self) -> str:  # ports may change if the first start found one taken
        return "etcd://" + ",".join(self.cluster.endpoints)

    def start(self) -> None:
        self.cluster.start()

    def leader(self) -> EtcdMember:
        return self.cluster.leader()

    def majority(self) -> list[Member]:
        members = self.cluster.members
        return list(members[: len(members) // 2 + 1])

    def restart(self) -> None:
        self.cluster.restart_all()

    def heal(self) -> None:
        self.cluster.healthy()

    def close(self) -> None:
        if self.owned:
            self.cluster.close()


class PostgresControl:
    """One server: it is its own leader and its own majority."""

    name = "postgres"

    def __init__(self, server: PostgresServer, owned: bool = False) -> None:
        self.server = server
        self.owned = owned

    @property
    def url(self) -> str:
        return self.server.dsn

    def leader(self) -> PostgresControl:
        return self

    def majority(self) -> list[Member]:
        return [self]

    def kill(self) -> None:
        self.server.kill()

    def start(self) -> None:
        self.server.start()

    def pause(self) -> None:
        self.server.pause()

    def resume(self) -> None:
        self.server.resume()

    def restart(self) -> None:
        self.server.stop()
        self.server.start()

    def heal(self) -> None:
        self.server.resume()
        self.server.start()

    def close(self) -> None:
        if self.owned:
            self.server.close()
