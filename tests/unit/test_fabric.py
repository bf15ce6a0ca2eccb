"""The fabric cuts servers off on loopback in the kernel: a connection is judged by the server
whose process opened it and the server whose port it dials; a server's own connections pass;
healing lets the cut connections carry on. Needs root and nft (scripts/setup installs it)."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tenure_tools import fabric as fabric_module
from tenure_tools.fabric import Fabric

pytestmark = pytest.mark.skipif(
    fabric_module.unavailable() is not None, reason=str(fabric_module.unavailable())
)


@pytest.fixture
def fabric() -> Iterator[Fabric]:
    with Fabric(servers=3) as fabric:
        yield fabric


def answers(conn: socket.socket, within: float = 0.3) -> bool:
    """Whether a ping on ``conn`` comes back within ``within`` seconds."""
    conn.sendall(b"ping")
    conn.settimeout(within)
    got = b""
    try:
        while len(got) < 4:
            chunk = conn.recv(4 - len(got))
            if not chunk:
                return False
            got += chunk
        return True
    except TimeoutError:
        return False


@contextmanager
def as_group(gid: int | None) -> Iterator[None]:
    """Sockets made in this block are opened by group ``gid`` (a server's processes)."""
    if gid is None:
        yield
        return
    os.setegid(gid)
    try:
        yield
    finally:
        os.setegid(0)


def dial(port: int, gid: int | None = None, timeout: float = 2.0) -> socket.socket:
    with as_group(gid):
        conn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    conn.settimeout(timeout)
    try:
        conn.connect(("127.0.0.1", port))
    except OSError:
        conn.close()
        raise
    return conn


def test_a_cut_server_is_neither_reached_nor_reaching(fabric: Fabric, sync_echo: int) -> None:
    fabric.serve(2, sync_echo)
    one = fabric.group(1)
    with dial(sync_echo, one) as to_two, dial(sync_echo) as stranger:
        assert answers(to_two) and answers(stranger)
        fabric.cut(2)
        assert not answers(to_two)  # from server 1 to the cut server 2
        assert not answers(stranger)  # from outside to it
        with pytest.raises(OSError):
            dial(sync_echo, one, timeout=0.5).close()  # a new connection: the SYN is dropped
        fabric.heal()
        assert answers(to_two, within=5) and answers(stranger, within=5)  # they carry on


def test_everything_leaving_a_cut_server_is_dropped_but_its_own(
    fabric: Fabric, sync_echo: int
) -> None:
    fabric.serve(1, sync_echo)
    with dial(sync_echo, fabric.group(1)) as own, dial(sync_echo, fabric.group(0)) as other:
        fabric.cut(1)
        assert answers(own)  # from server 1 to server 1
        assert not answers(other)
        fabric.cut(0)
        fabric.heal(1)
        assert not answers(other, within=1)  # server 0 is still cut
    fabric.heal()


def test_connections_of_nobody_pass_whatever_is_cut(fabric: Fabric, sync_echo: int) -> None:
    with dial(sync_echo) as stranger, dial(sync_echo, fabric.group(0)) as from_zero:
        fabric.cut(1, 2)
        assert answers(stranger)  # outside to outside
        assert answers(from_zero)  # server 0 to a port of nobody
        fabric.cut(0)
        assert not answers(from_zero) and answers(stranger)


def test_fabrics_side_by_side_drop_only_what_they_marked(sync_echo: int) -> None:
    with Fabric(servers=2) as first:
        first.serve(1, sync_echo)
        with dial(sync_echo, first.group(0)) as conn:
            second = Fabric(servers=2)
            second.tag = first.tag % 255 + 1  # in one process: give it another tag by hand
            second.table += "x"
            with second:
                second.cut(0, 1)
                assert answers(conn)
                first.cut(0)
                assert not answers(conn)
            first.heal()


def test_bad_servers_are_refused() -> None:
    with pytest.raises(ValueError, match="1 to 12"):
        Fabric(servers=13)
    with Fabric(servers=2) as fabric, pytest.raises(ValueError, match="no server 2"):
        fabric.group(2)


def test_the_table_goes_with_the_fabric_or_with_the_next_one() -> None:
    def tables() -> str:
        return subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout

    with Fabric(servers=1) as fabric:
        assert f"table ip {fabric.table}" in tables()
    assert fabric.table not in tables()
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid nobody runs now: its fabric was killed before closing
    left = f"{fabric_module.TABLE}{gone.pid}"
    subprocess.run(["nft", "add", "table", "ip", left], check=True)
    with Fabric(servers=1):
        assert f"table ip {left}\n" not in tables()
