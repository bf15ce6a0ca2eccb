"""Servers on one machine's loopback that can be cut off from each other: a correlated failure
("these three machines fell off the network") for a drill on one host, made by the kernel's
packet filter, so that nothing stands in the traffic's way while nothing is cut.

A *server* is a number. Its processes run with a group id of its own (`group`: pass it to
``subprocess.Popen(group=...)``), and the ports it listens on are declared (`serve`). A
nftables table of this fabric's own marks each new loopback connection (conntrack) with the
server whose process opened it and the server whose port it dials; a process of no server and
a port of no server are *outside* (a shared service, the load generator).

``cut(*servers)`` drops every packet, both ways, of every connection that touches a cut server
and joins two different places — current connections and new ones: a blackhole, where a
connect times out and a connection that was open hears nothing. A server's own processes still
reach each other. ``heal`` drops nothing more: TCP retransmits what was lost and the
connections carry on, as after a real partition shorter than their time-outs.

It needs root (a process's group id, the packet filter) and the ``nft`` command (Debian's
nftables); `unavailable` says what is missing. Only 127.0.0.1 on the loopback device is
touched, only connections this fabric marked are dropped, and the table goes with `close`
(a table left by a process that died is removed by the next fabric).

Example::

    with Fabric(servers=3) as fabric:
        fabric.serve(2, member.client_port, member.peer_port)
        member.group = fabric.group(2)  # before it starts: its connections come from server 2
        fabric.cut(2)  # server 2 can neither reach nor be reached
        fabric.heal(2)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

MAX_SERVERS = 12
"""A connection's mark: bits 0–11 the opener's server, 12–23 the dialled server's, 24–31 the
fabric's tag (fabrics side by side drop only what they marked)."""
_DIALLED, _TAG = 12, 24
TABLE = "tenure_fabric_"
GROUP_BASE = 0x7E000000
"""Group ids far above any a system assigns: the servers' processes run with these."""


def unavailable() -> str | None:
    """Why a fabric cannot be made here, or None if it can."""
    if os.geteuid() != 0:
        return "cutting servers off needs root (the servers' group ids, the packet filter)"
    if shutil.which("nft") is None:
        return "cutting servers off needs the nft command (Debian: apt-get install nftables)"
    return None


def _nft(script: str) -> None:
    done = subprocess.run(["nft", "-f", "-"], input=script, text=True, capture_output=True)
    if done.returncode:
        raise RuntimeError(f"nft: {done.stderr.strip().splitlines()[0] if done.stderr else '?'}")


def _reap_tables() -> None:
    """Remove the tables of fabrics whose process is gone (killed before its `close`)."""
    listed = subprocess.run(["nft", "list", "tables"], text=True, capture_output=True)
    for pid in re.findall(rf"^table ip {TABLE}(\d+)$", listed.stdout, re.M):
        if not os.path.exists(f"/proc/{pid}"):
            _nft(f"delete table ip {TABLE}{pid}\n")


class Fabric:
    """The servers, the ports they serve, and which of them are cut off now."""

    def __init__(self, servers: int) -> None:
        if not 0 < servers <= MAX_SERVERS:
            raise ValueError(f"a fabric holds 1 to {MAX_SERVERS} servers, not {servers}")
        reason = unavailable()
        if reason is not None:
            raise RuntimeError(reason)
        self.servers = servers
        self.cut_off: frozenset[int] = frozenset()
        self.tag = 1 + os.getpid() % 255
        self.table = f"{TABLE}{os.getpid()}"
        self._open = False

    def open(self) -> Fabric:
        """Make the table: from now on every new loopback connection is marked."""
        _reap_tables()
        lines = [
            f"table ip {self.table} {{",
            "  chain out {",
            "    type filter hook output priority 0; policy accept;",
            '    oifname "lo" ip daddr 127.0.0.1 ct state new jump mark_new',
            '    oifname "lo" ip daddr 127.0.0.1 jump cuts',
            "  }",
            "  chain mark_new {",
            *(
                f"    meta skgid {self.group(s)} ct mark set ct mark or {self._bit(s, 0):#x}"
                for s in range(self.servers)
            ),
            "  }",
            "  chain cuts {",
            "  }",
            "}",
        ]
        _nft("\n".join(lines) + "\n")
        self._open = True
        return self

    def close(self) -> None:
        if self._open:
            self._open = False
            _nft(f"delete table ip {self.table}\n")

    def __enter__(self) -> Fabric:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _bit(self, server: int, field: int) -> int:
        if not 0 <= server < self.servers:
            raise ValueError(f"no server {server} in a fabric of {self.servers}")
        return self.tag << _TAG | 1 << (field + server)

    def group(self, server: int) -> int:
        """The group id the processes of ``server`` run with (their connections are its)."""
        self._bit(server, 0)
        return GROUP_BASE + self.tag * MAX_SERVERS + server

    def serve(self, server: int, *ports: int) -> None:
        """``server`` listens on ``ports``: a connection to one of them dials that server."""
        mark = self._bit(server, _DIALLED)
        for port in ports:
            _nft(
                f"add rule ip {self.table} mark_new tcp dport {port}"
                f" ct mark set ct mark or {mark:#x}\n"
            )

    def cut(self, *servers: int) -> None:
        self._switch(self.cut_off | set(servers))

    def heal(self, *servers: int) -> None:
        """Reconnect ``servers`` (all, if none is named)."""
        self._switch(self.cut_off - set(servers) if servers else frozenset())

    def _switch(self, cut_off: frozenset[int]) -> None:
        """One atomic change of the table: a connection with exactly one end on a cut server
        (the other elsewhere, or outside) is dropped."""
        lines = [f"flush chain ip {self.table} cuts"]
        for server in sorted(cut_off):
            opened, dialled = self._bit(server, 0), self._bit(server, _DIALLED)
            mask = 0xFF << _TAG | opened | dialled
            rule = f"add rule ip {self.table} cuts ct mark and {mask:#x} =="
            lines += [f"{rule} {opened:#x} drop", f"{rule} {dialled:#x} drop"]
        _nft("\n".join(lines) + "\n")
        self.cut_off = cut_off
