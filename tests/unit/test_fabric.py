"""The fabric cuts servers off on loopback: a link is judged by the process that opened it and
the server behind the front; a server's own links pass; healing resets what was cut."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

from tenure.testing.fabric import Fabric


@pytest.fixture
def fabric() -> Iterator[Fabric]:
    with Fabric() as fabric:
        yield fabric


def answers(conn: socket.socket) -> bool:
    """Whether a ping on ``conn`` comes back within 0.3 s."""
    conn.sendall(b"ping")
    conn.settimeout(0.3)
    try:
        return conn.recv(4) == b"ping"
    except TimeoutError:
        return False


def dial(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=2)


def test_a_cut_server_is_neither_reached_nor_reaching(fabric: Fabric, sync_echo: int) -> None:
    fabric.claim(1, os.getpid())  # this test's connections come from server 1
    to_two, to_outside = fabric.front(2, sync_echo), fabric.front(None, sync_echo)
    with dial(to_two) as a, dial(to_outside) as b:
        assert answers(a) and answers(b)
        fabric.cut(2)
        assert not answers(a) and answers(b)
        with dial(to_two) as late:
            assert not answers(late)  # new links too
        fabric.heal()
        with pytest.raises(OSError):
            a.sendall(b"x")
            a.settimeout(1)
            assert a.recv(4) == b""  # reset: its stream lost bytes
        with dial(to_two) as again:
            assert answers(again)
        fabric.cut(1)  # the source itself: everything leaving it is dropped
        assert not answers(b)


def test_a_servers_own_links_pass_and_strangers_are_outside(fabric: Fabric, sync_echo: int) -> None:
    to_one = fabric.front(1, sync_echo)
    with dial(to_one) as stranger:
        fabric.claim(1, os.getpid())  # claimed after it connected: placed again at the cut
        fabric.cut(1)
        assert answers(stranger)  # from server 1 to server 1
    fabric.heal()
    other = Fabric().start_in_thread()
    try:
        with dial(other.front(2, sync_echo)) as outside:
            other.cut(3)
            assert answers(outside)  # neither end is cut
            other.cut(2)
            assert not answers(outside)
    finally:
        other.close()
