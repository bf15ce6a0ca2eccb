"""The store under the lose-servers drill (`tenure_tools.drill`): an etcd cluster or a
ZooKeeper ensemble, one member on each of the drill's servers, seen the same way by the drill —
its members' processes and ports, its URL, and who leads."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, cast

from tenure.stores._registry import REGISTRY
from tenure.stores.etcd.server import EtcdCluster, EtcdMember
from tenure.stores.zookeeper.server import ZooKeeperEnsemble, ZooKeeperServer

Store = Literal["etcd", "zookeeper"]
STORES: tuple[Store, ...] = tuple(
    cast(Store, e.key) for e in REGISTRY if e.server is not None and e.members is not None
)  # the stores whose launcher starts a cluster of several members (the registry says which)


class PortsMoved(RuntimeError):
    """A member started on other ports than it was given (another process took one first)."""


class DrillCluster:
    """``servers`` members of ``store`` with their data under ``data_root``. etcd runs with
    its own default timing (heartbeat 100 ms, election 1 s) and pre-vote, so that a member cut
    off cannot depose the leader when it returns; ZooKeeper with the test ensembles' tick of
    100 ms."""

    def __init__(self, store: Store, servers: int, data_root: Path | None) -> None:
        self.store = store
        self.group: EtcdCluster | ZooKeeperEnsemble
        if store == "etcd":
            self.group = EtcdCluster(
                servers, data_root=data_root, pre_vote=True, heartbeat_ms=100, election_ms=1000
            )
        else:
            self.group = ZooKeeperEnsemble(servers, data_root=data_root)

    @property
    def members(self) -> list[EtcdMember | ZooKeeperServer]:
        return list(self.group.processes)

    def ports(self, server: int) -> tuple[int, ...]:
        """Every port the member on ``server`` listens on (clients' and peers')."""
        member = self.members[server]
        if isinstance(member, EtcdMember):
            return (member.client_port, member.peer_port)
        assert isinstance(member, ZooKeeperServer)
        return (member.client_port, member.quorum_port, member.election_port)

    def url(self, first: int) -> str:
        """The store URL that names every member, ``first``'s first."""
        ports = [m.client_port for m in self.members]
        ordered = ports[first:] + ports[:first]
        return f"{self.store}://" + ",".join(f"127.0.0.1:{p}" for p in ordered)

    def start(self) -> None:
        before = [self.ports(i) for i in range(len(self.members))]
        self.group.start()
        if [self.ports(i) for i in range(len(self.members))] != before:
            raise PortsMoved(f"{self.store} moved to other ports at start")

    def close(self) -> None:
        self.group.close()

    def leader(self) -> int:
        """The server whose member leads now (waits through an election)."""
        return self.members.index(self.group.leader())

    def leads(self, server: int) -> bool:
        """Whether the member on ``server`` leads now (False if it does not answer at once)."""
        member = self.members[server]
        if not member.running:
            return False
        if isinstance(member, ZooKeeperServer):
            return member.mode() == "leader"
        assert isinstance(member, EtcdMember)
        try:
            status = member.request("/v3/maintenance/status", {}, timeout=0.3)
        except (OSError, ValueError):
            return False
        header = status.get("header")
        return isinstance(header, dict) and status.get("leader") == header.get("member_id")
