"""Store servers a chaos run can fault: the same few switches over an etcd cluster, a
ZooKeeper ensemble, a PostgreSQL server or a Redis primary with its replica, started by the
harness (or a test fixture)."""

from __future__ import annotations

import time
from typing import Protocol

from ..etcd_cluster import EtcdCluster, EtcdMember
from ..postgres_server import HOST, PostgresServer
from ..proxy import ChaosProxy, ThreadedChaosProxy
from ..redis_server import RedisServer
from ..zookeeper_ensemble import ZooKeeperEnsemble, ZooKeeperServer


class Member(Protocol):
    @property
    def name(self) -> str: ...

    def kill(self) -> None: ...
    def start(self) -> object: ...
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


class ZooKeeperControl:
    def __init__(self, ensemble: ZooKeeperEnsemble, owned: bool = False) -> None:
        self.ensemble = ensemble
        self.owned = owned

    @property
    def url(self) -> str:
        return "zookeeper://" + ",".join(self.ensemble.endpoints)

    def start(self) -> None:
        self.ensemble.start()

    def leader(self) -> ZooKeeperServer:
        return self.ensemble.leader()

    def majority(self) -> list[Member]:
        servers = self.ensemble.servers
        return list(servers[: len(servers) // 2 + 1])

    def restart(self) -> None:
        for server in self.ensemble.servers:
            server.stop()
        self.ensemble.healthy()

    def heal(self) -> None:
        self.ensemble.healthy()

    def close(self) -> None:
        if self.owned:
            self.ensemble.close()


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


class RedisControl:
    """A Redis primary and one asynchronous replica, as a small production setup has them.

    Clients reach the primary through a front proxy (one address, like a virtual IP or a
    Sentinel-aware proxy), so a fail-over moves that address to the promoted replica. The replica
    replicates through a proxy too: pausing the replica would not lose writes (they wait in its
    socket buffer), blackholing its link does. ``leader()`` and ``majority()`` are the primary.
    Both servers run with the clock shift, so the primary's clock can jump whichever it is.
    """

    def __init__(self) -> None:
        self.servers: list[RedisServer] = []
        self._front: ThreadedChaosProxy | None = None
        self._link: ThreadedChaosProxy | None = None

    @property
    def primary(self) -> RedisServer:
        return self.servers[0]

    @property
    def replica(self) -> RedisServer:
        return self.servers[1]

    @property
    def front(self) -> ThreadedChaosProxy:
        if self._front is None:
            raise RuntimeError("RedisControl is not started")
        return self._front

    @property
    def link(self) -> ThreadedChaosProxy:
        if self._link is None:
            raise RuntimeError("RedisControl is not started")
        return self._link

    @property
    def url(self) -> str:
        return f"redis://{self.front.address}/0"

    def start(self) -> None:
        try:
            self.servers = [RedisServer(clock_shift=True).start() for _ in range(2)]
            self._front = ChaosProxy(HOST, self.primary.port).start_in_thread()
            self._link = ChaosProxy(HOST, self.primary.port).start_in_thread()
            self._follow(self.replica)
        except BaseException:
            self.close()
            raise

    def _follow(self, server: RedisServer, timeout: float = 10.0) -> None:
        """Make ``server`` replicate the primary through the link proxy, synced when it returns."""
        server.command("REPLICAOF", HOST, str(self.link.port))
        deadline = time.monotonic() + timeout
        while "master_link_status:up" not in server.command("INFO", "replication"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Redis replica did not sync within {timeout}s")
            time.sleep(0.02)

    def cut_replication(self) -> None:
        """Replication stalls (its link blackholed) while clients write on: asynchronous
        replication's lag, made long."""
        self.link.set_mode("blackhole")

    def fail_over(self) -> str:
        """The primary dies (SIGKILL), the replica is promoted and the clients' address moves to
        it: every write since replication stalled is gone. The old primary comes back, empty, as
        the new replica. Returns the promoted server's name."""
        old, new = self.primary, self.replica
        old.kill()
        new.promote()
        self.front.retarget(HOST, new.port)
        self.servers = [new, old]
        self.link.retarget(HOST, new.port)
        self.link.set_mode("pass")
        old.start()
        self._follow(old)
        return new.name

    def clock_jump(self, seconds: float) -> None:
        """The primary's wall clock (the one that expires keys) jumps ``seconds`` forward."""
        self.primary.clock_jump(seconds)

    def leader(self) -> RedisServer:
        """The primary: killed and started again, it comes back empty (no persistence) and its
        replica syncs that emptiness, as an unpersisted Redis does."""
        return self.primary

    def majority(self) -> list[Member]:
        return [self.primary]

    def restart(self) -> None:
        self.primary.stop()
        self.primary.start()

    def heal(self) -> None:
        for server in self.servers:
            if server.paused:
                server.resume()
            server.start()
        self.link.heal()

    def close(self) -> None:
        for proxy in (self._front, self._link):
            if proxy is not None:
                proxy.close()
        for server in self.servers:
            server.close()


def launch(key: str, members: int | None = None) -> ServerControl:
    """A throw-away server (not started yet) for the store of registry key ``key``: etcd and
    ZooKeeper with ``members`` (default 3), PostgreSQL, Redis with its replica."""
    if key == "etcd":
        return EtcdControl(EtcdCluster(members or 3), owned=True)
    if key == "zookeeper":
        return ZooKeeperControl(ZooKeeperEnsemble(members or 3), owned=True)
    if key == "postgres":
        return PostgresControl(PostgresServer(), owned=True)
    if key == "redis":
        return RedisControl()
    raise ValueError(f"no throw-away server for the {key} store")
