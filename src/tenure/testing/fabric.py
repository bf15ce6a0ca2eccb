"""Servers on one machine's loopback that can be cut off from each other, without root: a
correlated failure ("these three machines fell off the network") for a drill on one host.

A *server* is a number; the processes it runs are *claimed* by pid; each port a server serves
(an etcd member's client and peer ports, a worker's nothing) is *fronted* by a proxy on a free
127.0.0.1 port, and everyone is pointed at the fronts. On each connection a front asks the
kernel which process opened it (``/proc/net/tcp`` and the claimed processes' descriptors; or a
front made for one source server only says it), so a link is known by both ends: from the
server that opened it (or from outside, for a process nobody claimed) to the server behind the
front (or to a shared service outside every server).

``cut(*servers)`` drops every byte, both ways, of every link that touches a cut server and
joins two different places — current links and new ones (a partition that looks alive: TCP
connects, nothing answers). A server's own processes still reach each other. ``heal`` lets
bytes flow again and resets the links that were cut, whose streams lost bytes for good, as a
long partition's TCP time-outs would end them.

Example::

    fabric = Fabric().start_in_thread()
    peer_front = fabric.front(server=2, port=member.peer_port)  # advertise this port
    fabric.claim(2, member.pid)
    fabric.cut(2)  # member 2 can neither reach nor be reached
    fabric.heal(2)
"""

from __future__ import annotations

import os
import socket
import struct
from contextlib import suppress
from pathlib import Path

import anyio
from anyio.abc import SocketAttribute, SocketStream

from .._loop_thread import LoopThread
from .proxy import ChaosProxy, _Link

OUTSIDE = None
"""The place of a process no server claimed, and of a service outside every server."""
_NETLINK_SOCK_DIAG, _SOCK_DIAG_BY_FAMILY, _NLMSG_ERROR = 4, 20, 2
_NO_COOKIE, _ALL_STATES = 0xFFFFFFFF, 0xFFFFFFFF
_INODE_AT = 4 + 48 + 16  # inet_diag_msg: family…retrans, the socket id, expires…uid, inode
LOOKUP = "lookup"
"""A front's links come from whoever opened them, asked of the kernel for each one."""


def socket_inode(local_port: int, remote_port: int) -> int | None:
    """The inode of the IPv4 loopback socket ``127.0.0.1:local_port → 127.0.0.1:remote_port``,
    asked of the kernel's socket diagnostics by that exact address (``/proc/net/tcp`` lists
    every socket of the host: tens of milliseconds once thousands wait in TIME_WAIT)."""
    loopback = socket.inet_aton("127.0.0.1") + bytes(12)
    sockid = struct.pack("!HH", local_port, remote_port) + loopback + loopback
    sockid += struct.pack("=III", 0, _NO_COOKIE, _NO_COOKIE)
    request = struct.pack("=BBBBI", socket.AF_INET, socket.IPPROTO_TCP, 0, 0, _ALL_STATES)
    request += sockid
    header = struct.pack("=IHHII", 16 + len(request), _SOCK_DIAG_BY_FAMILY, 1, 1, 0)
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as nl:
            nl.settimeout(1)
            nl.send(header + request)
            answer = nl.recv(65536)
    except OSError:
        return None
    if len(answer) < 16 + _INODE_AT + 4 or struct.unpack_from("=H", answer, 4)[0] == _NLMSG_ERROR:
        return None
    return int(struct.unpack_from("=I", answer, 16 + _INODE_AT)[0])


def holds_socket(pid: int, inode: int) -> bool:
    link = f"socket:[{inode}]"
    with suppress(OSError):
        for fd in os.scandir(f"/proc/{pid}/fd"):
            with suppress(OSError):
                if os.readlink(fd.path) == link:
                    return True
    return False


class _Front(ChaosProxy):
    """One fronted port: judges each link by its two ends, as the fabric says."""

    def __init__(self, fabric: Fabric, server: int | None, port: int, source: object) -> None:
        super().__init__("127.0.0.1", port)
        self.fabric = fabric
        self.server = server
        self.source = source

    async def _source(self, client: SocketStream) -> object:
        if self.source is not LOOKUP:
            return self.source
        port = client.extra(SocketAttribute.remote_port)
        return await anyio.to_thread.run_sync(self.fabric.place_of, port, self.port)

    def _drops(self, link: _Link, response: bool) -> bool:
        if self.fabric.blocked(link.source, self.server):
            link.cut = True
            return True
        return super()._drops(link, response)

    def place_again(self) -> None:
        for link in list(self._links):
            if link.source is OUTSIDE and self.source is LOOKUP:
                port = link.client.extra(SocketAttribute.remote_port)
                link.source = self.fabric.place_of(port, self.port)

    def reset_healed(self) -> None:
        """Abort the links that were cut and are not now: their streams lost bytes for good."""
        for link in list(self._links):
            if link.cut and not self.fabric.blocked(link.source, self.server):
                link.abort()


class Fabric:
    """The servers, their processes and fronts, and which servers are cut off now."""

    def __init__(self) -> None:
        self.cut_off: frozenset[int] = frozenset()
        self._pids: dict[int, int] = {}  # pid → server
        self._fronts: list[_Front] = []
        self._thread: LoopThread | None = None

    def start_in_thread(self) -> Fabric:
        """Run the fronts on an event loop of their own, in a daemon thread."""
        self._thread = LoopThread("fabric")
        return self

    def close(self) -> None:
        if self._thread is not None:
            self._thread.close()
            self._thread = None

    def __enter__(self) -> Fabric:
        return self.start_in_thread()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def front(self, server: int | None, port: int, source: int | str | None = LOOKUP) -> int:
        """Listen on a free loopback port, forwarding to ``port`` of ``server`` (``None``: a
        service outside every server); returns the port to point clients at. ``source``: the
        server every link of this front comes from, when only its processes use it (one front
        per client and server: no question to the kernel per connection, which costs
        milliseconds); by default each link's opener is looked up."""
        assert self._thread is not None, "start_in_thread() first"
        proxy = _Front(self, server, port, source)
        self._thread.enter(proxy)
        self._fronts.append(proxy)
        return proxy.port

    def claim(self, server: int, pid: int) -> None:
        """Process ``pid`` runs on ``server``: the connections it opens come from there."""
        self._pids[pid] = server

    def place_of(self, client_port: int, front_port: int) -> int | None:
        """The server whose process opened the connection from ``client_port``, or OUTSIDE."""
        inode = socket_inode(client_port, front_port)
        if inode is not None:
            for pid, server in list(self._pids.items()):
                if Path(f"/proc/{pid}").exists() and holds_socket(pid, inode):
                    return server
        return OUTSIDE

    def blocked(self, source: object, server: int | None) -> bool:
        """Whether a link from ``source`` to ``server`` is cut now."""
        return source != server and (source in self.cut_off or server in self.cut_off)

    def cut(self, *servers: int) -> None:
        self._switch(self.cut_off | set(servers))

    def heal(self, *servers: int) -> None:
        """Reconnect ``servers`` (all, if none is named)."""
        self._switch(self.cut_off - set(servers) if servers else frozenset())

    def _switch(self, cut_off: frozenset[int]) -> None:
        assert self._thread is not None, "start_in_thread() first"

        def switch() -> None:
            self.cut_off = cut_off
            for front in self._fronts:
                front.place_again()  # opened before its process was claimed
                front.reset_healed()

        self._thread.call_sync(switch)
