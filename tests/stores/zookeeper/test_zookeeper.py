"""ZooKeeper-specific behaviour, on the real 3-server ensemble: tokens are czxids, a lost create
reply is found again, sessions ride out short disconnections and lose everything on expiry, and
a hold survives the ensemble's leader dying."""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import anyio
import pytest

import tenure
from tenure import InvalidArgument
from tenure._url import open_store
from tenure.stores._spi import Busy, Grant, Holder
from tenure.stores.zookeeper import ZooKeeperStore
from tenure.stores.zookeeper.nodes import Mark
from tenure.stores.zookeeper.server import ZooKeeperEnsemble
from tenure.stores.zookeeper.session import ZooKeeperSession
from tenure.stores.zookeeper.transport import result, server_port

if TYPE_CHECKING:
    from kazoo.client import KazooClient  # type: ignore[import-untyped]

pytestmark = pytest.mark.anyio
OWNER = Holder("test", os.getpid(), "zk")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_url_parsing() -> None:
    store = ZooKeeperStore.from_url("zookeeper://a:1,b/x/y")
    assert (store.hosts, store.chroot) == (["a:1", "b:2181"], "/x/y")
    assert ZooKeeperStore.from_url("zookeeper://h").chroot == "/tenure"
    for bad in (
        "zookeeper://",
        "zookeeper://h:0",
        "zookeeper://h:x",
        "zookeeper://u:pw@h/x?tls=perhaps",
        "zookeeper://u:pw@h/x/locks",
        "zookeeper://h/a/../b",
        "zookeeper://h/zookeeper",
        "zookeeper://h/x?y=1",
        "zookeeper://h h/x",
        "etcd://h",
    ):
        with pytest.raises(InvalidArgument) as raised:
            ZooKeeperStore.from_url(bad)
        assert "pw" not in str(raised.value)


def test_names_never_escape_their_parent() -> None:
    store = ZooKeeperStore.from_url("zookeeper://h/t")
    assert store.paths.parent("a/b") == "/t/locks/a%2Fb"
    assert store.paths.parent("..") == "/t/locks/%2E%2E"
    assert store.paths.parent(".") == "/t/locks/%2E"


async def test_token_is_the_czxid_and_grows_across_a_recreated_parent(
    zookeeper_store_url: str,
) -> None:
    store = open_store(zookeeper_store_url)
    assert isinstance(store, ZooKeeperStore)
    session = await store.open_session(5, OWNER)
    try:
        first = await store.attempt(session, "p", None, False)
        assert isinstance(first, Grant)
        reader = await store.reader()
        parent = store.paths.parent("p")
        [child] = await result(reader.get_children_async(parent))
        _, stat = await result(reader.get_async(f"{parent}/{child}"))
        assert stat.czxid == first.token
        await store.release(session, "p", first.token)
        await result(reader.delete_async(parent))  # sequence numbers restart from 0 now
        second = await store.attempt(session, "p", None, False)
        assert isinstance(second, Grant) and second.token > first.token
        reader.sync_async(parent)  # the reader's server may lag: answered in order, before
        [child] = await result(reader.get_children_async(parent))
        assert child.endswith("-0000000000")
        await store.release(session, "p", second.token)
    finally:
        await store.close_session(session)
        await store.aclose()


async def test_a_create_whose_answer_was_lost_is_found_again(zookeeper_store_url: str) -> None:
    store = open_store(zookeeper_store_url)
    assert isinstance(store, ZooKeeperStore)
    session = await store.open_session(5, OWNER)
    assert isinstance(session, ZooKeeperSession)
    try:
        parent, prefix = store.paths.parent("lost"), session.prefix()
        path, token, _, _, _ = await store._enqueue(session, "lost", prefix)
        # The same create sent again (as after a connection loss): found, not made twice.
        again, token_again, children, _, _ = await store._enqueue(session, "lost", prefix, True)
        assert (again, token_again) == (path, token)
        assert len(children) == 1
        # A create in doubt is cleaned at the next keep-alive.
        session.in_doubt.add((parent, prefix))
        assert await store.keep_alive(session)
        assert await store.locks("lost") == []
    finally:
        await store.close_session(session)
        await store.aclose()


async def test_a_first_wait_that_fails_after_queueing_leaves_no_node_behind(
    zookeeper_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first attempt to wait puts its node in the queue, then reads the holder; if that read
    gets no answer the attempt fails with no ticket to leave by. Its node must not stay: the
    session lives on, and its node would hold up everyone queued behind it."""
    store = open_store(zookeeper_store_url)
    assert isinstance(store, ZooKeeperStore)
    holder, failing, later = [await store.open_session(5, OWNER) for _ in range(3)]
    name = f"orphan-{uuid.uuid4().hex[:6]}"
    try:
        held = await store.attempt(holder, name, None, False)
        assert isinstance(held, Grant)
        with monkeypatch.context() as patch:

            async def no_answer(*_: object, **__: object) -> None:
                raise tenure.StoreUnavailable("no answer (a read made to fail)")

            patch.setattr(store, "_holder", no_answer)
            with pytest.raises(tenure.StoreUnavailable):
                await store.attempt(failing, name, None, True)
        [info] = await store.locks(name)
        assert info.waiters == 1  # its node is there until the failing session's keep-alive
        assert await store.keep_alive(failing)
        [info] = await store.locks(name)
        assert info.waiters == 0
        await store.release(holder, name, held.token)
        assert isinstance(await store.attempt(later, name, None, False), Grant)
    finally:
        for session in (holder, failing, later):
            await store.close_session(session)
        await store.aclose()


async def test_a_short_disconnection_keeps_the_session_and_token(
    zookeeper_store_url: str, zookeeper_ensemble: ZooKeeperEnsemble
) -> None:
    async with tenure.connect_async(zookeeper_store_url) as client:
        lease = await client.lock("blip", ttl=4).acquire()
        store = client.store
        assert isinstance(store, ZooKeeperStore)
        [keeper] = client._pool._sessions.values()
        session = keeper.handle
        assert isinstance(session, ZooKeeperSession)
        port = server_port(session.client)
        [server] = [s for s in zookeeper_ensemble.servers if s.client_port == port]
        server.pause()  # the client's server stops answering: SUSPENDED, then elsewhere
        try:
            with pytest.raises(tenure.StoreUnavailable):
                await store.keep_alive(session)
            await anyio.sleep(1.0)
        finally:
            server.resume()
        with anyio.fail_after(3):
            while not await _alive(store, session):
                await anyio.sleep(0.05)
        assert session.client.client_id[0] == session.session_id  # the same ZooKeeper session
        lease.check()
        [info] = await client.locks("blip")
        assert info.token == lease.token
        await lease.release()


async def _alive(store: ZooKeeperStore, session: ZooKeeperSession) -> bool:
    try:
        return await store.keep_alive(session)
    except tenure.StoreUnavailable:
        return False


async def test_session_expiry_loses_the_lease(zookeeper_store_url: str) -> None:
    store = open_store(zookeeper_store_url)
    other = open_store(zookeeper_store_url)
    one = await store.open_session(1, OWNER)
    two = await other.open_session(5, OWNER)
    try:
        granted = await store.attempt(one, "exp", None, True)
        assert isinstance(granted, Grant)
        waiting = await other.attempt(two, "exp", None, True)
        assert isinstance(waiting, Busy)
        await anyio.sleep(2.0)  # no keep-alive: the server expires the session after 1 s
        assert not await store.keep_alive(one)
        with pytest.raises(tenure.LeaseLost):
            await store.attempt(one, "exp", None, True)
        assert not await store.proclaim(one, "exp", granted.token, "late")
        outcome = await other.attempt(two, "exp", waiting.ticket, True)
        assert isinstance(outcome, Grant) and outcome.token > granted.token
    finally:
        await store.close_session(one)
        await other.close_session(two)
        await store.aclose()
        await other.aclose()


async def test_a_hold_survives_the_ensemble_leader_dying(
    zookeeper_store_url: str, zookeeper_ensemble: ZooKeeperEnsemble
) -> None:
    leader = zookeeper_ensemble.leader()
    try:
        async with tenure.connect_async(zookeeper_store_url) as client:
            async with client.lock("hold", ttl=4) as lease:
                leader.kill()
                await anyio.sleep(3.0)  # an election, and renewals through it
                lease.check()
                [info] = await client.locks("hold")
                assert info.token == lease.token
            async with client.lock("hold", ttl=4) as again:
                assert again.token > lease.token
    finally:
        await anyio.to_thread.run_sync(zookeeper_ensemble.healthy)


async def test_the_hold_back_marker_comes_with_the_grant_and_goes_with_the_release(
    zookeeper_store_url: str,
) -> None:
    """Lock-delay on ZooKeeper: a persistent marker beside the lock's parent, made with the
    grant and deleted with the release (also by closing the session); one left by an expired
    session is stamped by the first reader that sees it, and counts from then."""
    store = open_store(zookeeper_store_url)
    assert isinstance(store, ZooKeeperStore)
    reader = await store.reader()
    marker = store.paths.marker("m")
    try:
        session = await store.open_session(5, OWNER, 2.0)
        first = await store.attempt(session, "m", None, False)
        assert isinstance(first, Grant)
        data, _ = await result(reader.get_async(marker))
        assert json.loads(data) == {"token": first.token, "lock_delay": 2.0}
        assert [info.name for info in await store.locks()] == ["m"]
        await store.release(session, "m", first.token)
        assert await result(reader.exists_async(marker)) is None
        assert isinstance(await store.attempt(session, "m", None, False), Grant)
        await store.close_session(session)
        assert await result(reader.exists_async(marker)) is None
        dead = await store.open_session(1, OWNER, 2.0)
        before = await store.attempt(dead, "m", None, False)
        assert isinstance(before, Grant)
        await store.release(dead, "m", before.token)
        # Released with no one waiting: the next grant's marker comes in its node's multi,
        # naming the attempt; its token is its own czxid, which is the node's.
        granted = await store.attempt(dead, "m", None, False)
        assert isinstance(granted, Grant)
        data, stat = await result(reader.get_async(marker))
        assert "token" not in json.loads(data) and json.loads(data)["attempt"]
        assert stat.czxid == granted.token == Mark.parse(data, stat).token
        with anyio.fail_after(5):  # never kept alive: the ensemble expires it
            while await store.locks("m"):
                await anyio.sleep(0.05)
        [held] = await store.lock_delays()
        assert (held.name, held.token) == ("m", granted.token) and 1.8 < held.free_in <= 2.0
        data, _ = await result(reader.get_async(marker))
        assert json.loads(data)["noticed"] is True and json.loads(data)["token"] == granted.token
        await store.close_session(dead)
    finally:
        await store.aclose()


async def synced(reader: KazooClient, request: Callable[[str], Any], path: str) -> Any:
    """``request(path)`` on the reader after a ``sync`` (answered in order): its server may lag
    behind the session's."""
    reader.sync_async(path)
    return await result(request(path))


async def test_a_marker_put_ahead_of_its_turn_is_taken_back(zookeeper_store_url: str) -> None:
    """A woken waiter with a lock-delay sends its marker's create with its listing; if others
    are still ahead (here a holder without lock-delay, which puts no marker), the marker is
    deleted again, and the waiter's own grant later puts it for real."""
    store = open_store(zookeeper_store_url)
    assert isinstance(store, ZooKeeperStore)
    reader = await store.reader()
    marker = store.paths.marker("w")
    plain = await store.open_session(5, OWNER)
    delayed = await store.open_session(5, OWNER, 2.0)
    try:
        held = await store.attempt(plain, "w", None, False)
        assert isinstance(held, Grant)
        busy = await store.attempt(delayed, "w", None, True)
        assert isinstance(busy, Busy) and busy.holder is not None
        again = await store.attempt(delayed, "w", busy.ticket, True)  # as after a wake-up
        assert isinstance(again, Busy) and again.holder is not None
        assert again.holder.token == held.token
        assert await synced(reader, reader.exists_async, marker) is None
        assert await store.lock_delays() == []
        await store.release(plain, "w", held.token)
        granted = await store.attempt(delayed, "w", again.ticket, True)
        assert isinstance(granted, Grant)
        data, stat = await synced(reader, reader.get_async, marker)
        assert Mark.parse(data, stat).token == granted.token
        await store.release(delayed, "w", granted.token)
        assert await synced(reader, reader.exists_async, marker) is None
    finally:
        await store.close_session(plain)
        await store.close_session(delayed)
        await store.aclose()


@pytest.fixture
def blackholes() -> Iterator[list[int]]:
    """Three loopback ports that drop every connect (SYN) silently, as a server cut off does:
    listeners with a full accept queue, never accepting."""
    held: list[socket.socket] = []
    ports = []
    try:
        for _ in range(3):
            listener = socket.socket()
            listener.bind(("127.0.0.1", 0))
            listener.listen(0)
            held.append(listener)
            port = listener.getsockname()[1]
            ports.append(port)
            while True:  # fill the queue until a connect is not answered
                filler = socket.socket()
                held.append(filler)
                filler.settimeout(0.2)
                try:
                    filler.connect(("127.0.0.1", port))
                except TimeoutError:
                    break
        yield ports
    finally:
        for sock in held:
            sock.close()


async def test_servers_that_drop_connects_cost_a_share_of_the_session_each(
    zookeeper_ensemble: ZooKeeperEnsemble, blackholes: list[int]
) -> None:
    """kazoo gives each TCP connect the whole session timeout: three dead servers before a live
    one (kazoo shuffles them) would cost a 2 s session's start. tenure gives each a share."""
    hosts = [f"127.0.0.1:{p}" for p in blackholes] + zookeeper_ensemble.endpoints[:1]
    store = open_store(f"zookeeper://{','.join(hosts)}/t_{uuid.uuid4().hex}")
    try:
        for _ in range(4):  # each start a new shuffle: the dead ones first at least once, likely
            session = await store.open_session(2, OWNER)
            assert await store.keep_alive(session)
            await store.close_session(session)
    finally:
        await store.aclose()


async def test_the_reader_leaves_a_server_that_stops_answering(
    zookeeper_store_url: str, zookeeper_ensemble: ZooKeeperEnsemble
) -> None:
    """kazoo counts every request sent as a ping: a reader kept busy never finds its server
    dead. A read unanswered drops that server, and the next read goes elsewhere."""
    store = open_store(zookeeper_store_url)
    assert isinstance(store, ZooKeeperStore)
    try:
        assert await store.locks() == []
        port = server_port(await store.reader())
        [server] = [s for s in zookeeper_ensemble.servers if s.client_port == port]
        server.pause()
        try:
            assert await store.locks() == []  # before: "no answer" after 8 s of asking it alone
            assert server_port(await store.reader()) != port
        finally:
            server.resume()
    finally:
        await store.aclose()
