"""What only the etcd store must show: revision tokens, key ranges, one wake-up per release,
fail-over through a killed or paused leader, compare-guarded release and writes, lost answers,
and one-line errors. Real etcd members only (the shared 3-member cluster of plugin_etcd)."""

from __future__ import annotations

import base64
import os
import time
import urllib.request
import uuid
from contextlib import AsyncExitStack
from typing import Any

import anyio
import pytest

import tenure
from tenure import AsyncClient, InvalidArgument, LeaseLost, NotAcquired, StoreUnavailable
from tenure.stores._spi import Busy, Change, Grant, Session
from tenure.stores.etcd import EtcdStore
from tenure.stores.etcd.keys import get_op, prefix_end, put_op
from tenure.stores.etcd.server import EtcdCluster, EtcdMember
from tenure.stores.etcd.session import EtcdSession, EtcdTicket
from tenure.testing import FaultyStore

pytestmark = pytest.mark.anyio
OWNER = tenure.Holder("test", os.getpid())


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def keys_under(member: EtcdMember, prefix: str) -> list[tuple[str, int]]:
    """(key, create revision) of every key under ``prefix``, read straight from etcd."""
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    answer = member.request("/v3/kv/range", {"key": b64(prefix), "range_end": b64(end)})
    kvs = answer.get("kvs", [])
    assert isinstance(kvs, list)
    return [(base64.b64decode(kv["key"]).decode(), int(kv["create_revision"])) for kv in kvs]


def namespace(url: str) -> str:
    return url.rsplit("/", 1)[1]


class CountingStore(FaultyStore):
    """Counts the attempts a client makes (no faults injected)."""

    def __init__(self, inner: EtcdStore) -> None:
        super().__init__(inner)
        self.etcd = inner
        self.attempts = 0

    async def attempt(
        self, session: Session, name: str, ticket: object | None, enqueue: bool
    ) -> Grant | Busy:
        self.attempts += 1
        return await super().attempt(session, name, ticket, enqueue)


async def test_tokens_are_create_revisions_and_grow_across_a_full_restart(
    etcd_cluster: EtcdCluster, etcd_store_url: str
) -> None:
    ns = namespace(etcd_store_url)
    tokens = []
    async with tenure.connect_async(etcd_store_url) as client:
        for _ in range(3):
            async with client.lock("rev", ttl=5) as lease:
                [(_, created)] = keys_under(etcd_cluster.members[0], f"{ns}/locks/rev/")
                assert lease.token == created
                tokens.append(lease.token)
    etcd_cluster.restart_all()
    async with tenure.connect_async(etcd_store_url) as client, client.lock("rev", ttl=5) as lease:
        tokens.append(lease.token)
    assert tokens == sorted(set(tokens)) and len(tokens) == 4, tokens


async def test_a_and_a_slash_b_are_independent(etcd_store_url: str) -> None:
    async with AsyncExitStack() as stack:
        a, b, c = [
            await stack.enter_async_context(tenure.connect_async(etcd_store_url)) for _ in "abc"
        ]
        held_ab = await a.lock("a/b", ttl=5).acquire()
        held_a = await b.lock("a", ttl=5).acquire(wait=False)  # not blocked by "a/b"
        held_pct = await c.lock("a%2Fb", ttl=5).acquire(wait=False)  # nor is the encoded look-alike
        async with anyio.create_task_group() as tg:
            tg.start_soon(c.lock("a/b", 5).acquire)  # one waiter on "a/b"
            with anyio.fail_after(5):
                while not (infos := await a.locks("a/b")) or infos[0].waiters < 1:
                    await anyio.sleep(0.01)
            [info_a] = await a.locks("a")
            assert info_a.token == held_a.token and info_a.waiters == 0  # never sees a/b's waiter
            assert {i.name for i in await a.locks()} == {"a", "a/b", "a%2Fb"}
            await held_ab.release()
            tg.cancel_scope.cancel()
        await held_a.release()
        await held_pct.release()


async def test_one_wake_up_and_one_attempt_per_release(etcd_store_url: str) -> None:
    waiters = 4
    order: list[int] = []
    async with AsyncExitStack() as stack:
        holder = await stack.enter_async_context(tenure.connect_async(etcd_store_url))
        stores = [CountingStore(EtcdStore.from_url(etcd_store_url)) for _ in range(waiters)]
        clients = [await stack.enter_async_context(AsyncClient(s)) for s in stores]
        lease = await holder.lock("herd", ttl=5).acquire()
        async with anyio.create_task_group() as tg:
            for index, client in enumerate(clients):

                async def take(index: int = index, client: AsyncClient = client) -> None:
                    async with client.lock("herd", ttl=5):
                        order.append(index)
                        await anyio.sleep(0.05)

                tg.start_soon(take)
                with anyio.fail_after(5):
                    while not (infos := await holder.locks("herd")) or infos[0].waiters <= index:
                        await anyio.sleep(0.01)
            await lease.release()
    assert order == list(range(waiters))
    # Each waiter: one attempt to queue, one after its single wake-up. No herd, no polling.
    assert [s.attempts for s in stores] == [2] * waiters
    assert [s.etcd.wakeups for s in stores] == [1] * waiters


async def hold_through(etcd_cluster: EtcdCluster, url: str, fault: str) -> None:
    leader = etcd_cluster.leader()
    others = [m.endpoint for m in etcd_cluster.members if m is not leader]
    ns = namespace(url)
    first_dead = f"etcd://{','.join([leader.endpoint, *others])}/{ns}"  # the leader first
    try:
        async with (
            tenure.connect_async(first_dead) as client,
            tenure.connect_async(url) as rival,
        ):
            lease = await client.lock("hold", ttl=4).acquire()
            if fault == "kill":
                leader.kill()
            else:
                leader.pause()
            await anyio.sleep(5)  # more than a TTL: renewals must have gone elsewhere
            lease.check()  # not lost
            [info] = await client.locks("hold")  # the client whose first member is down
            assert info.token == lease.token
            with pytest.raises(NotAcquired) as busy:
                await rival.lock("hold", ttl=4).acquire(wait=False)
            assert busy.value.lock is not None and busy.value.lock.token == lease.token
            await lease.release()
            again = await rival.lock("hold", ttl=4).acquire(wait=False)
            assert again.token > lease.token
            await again.release()
    finally:
        etcd_cluster.healthy()
    assert etcd_cluster.leader() is not None


def watching(cluster: EtcdCluster) -> tuple[int, int]:
    """(watch streams, watchers) open on every member, from etcd's own metrics."""
    streams = watchers = 0
    for member in cluster.members:
        url, context = member.client_url + "/metrics", cluster.client_context()
        with urllib.request.urlopen(url, timeout=2, context=context) as resp:
            for line in resp.read().decode().splitlines():
                name, _, value = line.partition(" ")
                if name == "etcd_debugging_mvcc_watch_stream_total":
                    streams += int(float(value))
                elif name == "etcd_debugging_mvcc_watcher_total":
                    watchers += int(float(value))
    return streams, watchers


async def test_a_clients_waiters_share_one_watch_stream(
    etcd_cluster: EtcdCluster, etcd_store_url: str
) -> None:
    """Thirty waiters of one client are thirty watches on one stream, not thirty streams; a
    waiter that gives up has its watch cancelled, and the hand-over still reaches the first."""
    count = 30
    before = watching(etcd_cluster)
    async with (
        tenure.connect_async(etcd_store_url) as holder,
        tenure.connect_async(etcd_store_url) as client,
    ):
        held = await holder.lock("crowd", ttl=5).acquire()
        got: list[int] = []
        async with anyio.create_task_group() as tg:
            scopes = []
            for index in range(count):
                scope = anyio.CancelScope()
                scopes.append(scope)

                async def wait(index: int = index, scope: anyio.CancelScope = scope) -> None:
                    with scope:
                        lease = await client.lock("crowd", ttl=5).acquire()
                        got.append(index)
                        await lease.release()

                tg.start_soon(wait)
                with anyio.fail_after(10):  # queued in this order (awaited, not assumed)
                    while not (infos := await holder.locks("crowd")) or infos[0].waiters <= index:
                        await anyio.sleep(0.01)
            with anyio.fail_after(10):
                while watching(etcd_cluster)[1] - before[1] < count:
                    await anyio.sleep(0.05)
            assert watching(etcd_cluster)[0] - before[0] == 1  # one stream for all of them
            for scope in scopes[10:]:
                scope.cancel()  # twenty give up
            with anyio.fail_after(10):
                while watching(etcd_cluster)[1] - before[1] > 10:
                    await anyio.sleep(0.05)
            await held.release()
        assert got == list(range(10))  # each woken in turn by its predecessor's release
    with anyio.fail_after(10):
        while watching(etcd_cluster) != before:
            await anyio.sleep(0.05)


async def test_lease_survives_a_killed_leader(
    etcd_cluster: EtcdCluster, etcd_store_url: str
) -> None:
    await hold_through(etcd_cluster, etcd_store_url, "kill")


async def test_lease_survives_a_paused_leader(
    etcd_cluster: EtcdCluster, etcd_store_url: str
) -> None:
    await hold_through(etcd_cluster, etcd_store_url, "pause")


async def test_stale_release_never_deletes_the_newer_key(
    etcd_cluster: EtcdCluster, etcd_store_url: str
) -> None:
    """Besides what conformance/test_locks.py checks on every store: etcd's own compare on the
    key's create revision, for a session that reuses its key name."""
    store = EtcdStore.from_url(etcd_store_url)
    prefix = f"{namespace(etcd_store_url)}/locks/x/"
    try:
        session = await store.open_session(5, OWNER)
        first = await store.attempt(session, "x", None, enqueue=True)
        assert isinstance(first, Grant)
        await store.release(session, "x", first.token)
        second = await store.attempt(session, "x", None, enqueue=True)  # the same key name again
        assert isinstance(second, Grant) and second.token > first.token
        [(key, _)] = keys_under(etcd_cluster.members[0], prefix)
        # A release retried with the old token (its first answer lost) must not delete it: the
        # store's own compare-and-delete, sent as such a retry would send it.
        assert not await store._delete(key.encode(), first.token)
        await store.release(session, "x", first.token)
        assert keys_under(etcd_cluster.members[0], prefix) == [(key, second.token)]
        await store.release(session, "x", second.token)
        assert keys_under(etcd_cluster.members[0], prefix) == []
        await store.close_session(session)
    finally:
        await store.aclose()


async def test_a_lost_answer_finds_its_own_key_instead_of_queueing_twice(
    etcd_cluster: EtcdCluster, etcd_store_url: str
) -> None:
    store = EtcdStore.from_url(etcd_store_url)
    real_call = store._gw.call
    lose_next = [False]

    async def call(path: str, body: dict[str, object], **options: Any) -> dict[str, object]:
        answer = await real_call(path, body, **options)
        if path == "kv/txn" and lose_next[0]:
            lose_next[0] = False
            raise StoreUnavailable("injected: the answer was lost")
        return answer

    store._gw.call = call  # type: ignore[method-assign]
    prefix = f"{namespace(etcd_store_url)}/locks/q/"
    try:
        holder, waiter = [await store.open_session(5, OWNER) for _ in range(2)]
        granted = await store.attempt(holder, "q", None, enqueue=True)
        assert isinstance(granted, Grant)
        lose_next[0] = True
        with pytest.raises(StoreUnavailable):
            await store.attempt(waiter, "q", None, enqueue=True)  # applied, answer lost
        busy = await store.attempt(waiter, "q", None, enqueue=True)  # the caller tries again
        assert isinstance(busy, Busy) and busy.holder is not None
        assert busy.holder.waiters == 1 and len(keys_under(etcd_cluster.members[0], prefix)) == 2
        assert busy.ticket is not None
        await store.leave(busy.ticket)
        # A lost grant: found again, same token, one key.
        await store.release(holder, "q", granted.token)
        lose_next[0] = True
        with pytest.raises(StoreUnavailable):
            await store.attempt(waiter, "q", None, enqueue=False)
        again = await store.attempt(waiter, "q", None, enqueue=False)
        assert isinstance(again, Grant)
        [(_, created)] = keys_under(etcd_cluster.members[0], prefix)
        assert created == again.token
        for session in (holder, waiter):
            await store.close_session(session)
        assert keys_under(etcd_cluster.members[0], prefix) == []
    finally:
        await store.aclose()


async def test_a_key_left_by_a_failed_request_goes_at_the_next_keep_alive(
    etcd_cluster: EtcdCluster, etcd_store_url: str
) -> None:
    store = EtcdStore.from_url(etcd_store_url)
    real_call = store._gw.call

    async def call(path: str, body: dict[str, object], **options: Any) -> dict[str, object]:
        answer = await real_call(path, body, **options)
        if path == "kv/txn":
            raise StoreUnavailable("injected: the answer was lost")
        return answer

    prefix = f"{namespace(etcd_store_url)}/locks/d/"
    try:
        holder, waiter = [await store.open_session(5, OWNER) for _ in range(2)]
        assert isinstance(await store.attempt(holder, "d", None, enqueue=True), Grant)
        store._gw.call = call  # type: ignore[method-assign]
        with pytest.raises(StoreUnavailable):
            await store.attempt(waiter, "d", None, enqueue=True)  # queued; the caller gives up
        store._gw.call = real_call  # type: ignore[method-assign]
        assert len(keys_under(etcd_cluster.members[0], prefix)) == 2
        assert await store.keep_alive(waiter)
        assert len(keys_under(etcd_cluster.members[0], prefix)) == 1
    finally:
        await store.aclose()


class Recorder:
    """Records the gateway calls of one store (path and body), passing them through."""

    def __init__(self, store: EtcdStore) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._real = store._gw.call
        store._gw.call = self.call  # type: ignore[method-assign]

    async def call(self, path: str, body: dict[str, Any], **options: Any) -> dict[str, Any]:
        self.calls.append((path, body))
        return await self._real(path, body, **options)

    def take(self) -> list[str]:
        """The paths called since the last take, a txn marked ``kv/txn+put`` if it can write."""
        paths = []
        for path, body in self.calls:
            ops = [*body.get("success", []), *body.get("failure", [])] if path == "kv/txn" else []
            paths.append(path + ("+put" if any("request_put" in op for op in ops) else ""))
        self.calls.clear()
        return paths


async def test_a_waiters_attempt_only_reads_unless_its_key_is_gone(
    etcd_cluster: EtcdCluster, etcd_store_url: str
) -> None:
    store = EtcdStore.from_url(etcd_store_url)
    recorder = Recorder(store)
    prefix = f"{namespace(etcd_store_url)}/locks/r/"
    try:
        a, b = [await store.open_session(5, OWNER) for _ in range(2)]
        granted = await store.attempt(a, "r", None, enqueue=True)
        busy = await store.attempt(b, "r", None, enqueue=True)
        assert isinstance(granted, Grant) and isinstance(busy, Busy)
        assert isinstance(busy.ticket, EtcdTicket)
        predecessor = busy.ticket.predecessor
        recorder.take()
        again = await store.attempt(b, "r", busy.ticket, enqueue=True)  # still busy
        assert isinstance(again, Busy) and again.ticket is busy.ticket
        assert busy.ticket.predecessor == predecessor
        assert recorder.take() == ["kv/txn"]  # one read-only txn; the holder's TTL remembered
        await store.release(a, "r", granted.token)
        recorder.take()
        won = await store.attempt(b, "r", busy.ticket, enqueue=True)
        assert isinstance(won, Grant) and recorder.take() == ["kv/txn"]
        [(_, created)] = keys_under(etcd_cluster.members[0], prefix)
        assert won.token == created
        await store.release(b, "r", won.token)
        # A waiter whose key was deleted under it is not granted on a read: it queues again.
        granted = await store.attempt(a, "r", None, enqueue=True)
        busy = await store.attempt(b, "r", None, enqueue=True)
        assert isinstance(granted, Grant) and isinstance(busy, Busy)
        assert isinstance(busy.ticket, EtcdTicket)
        etcd_cluster.members[1].request("/v3/kv/deleterange", {"key": b64(busy.ticket.key)})
        await store.release(a, "r", granted.token)
        recorder.take()
        requeued = await store.attempt(b, "r", busy.ticket, enqueue=True)
        assert recorder.take() == ["kv/txn", "kv/txn+put"]
        assert isinstance(requeued, Grant) and requeued.token > granted.token
        await store.release(b, "r", requeued.token)
    finally:
        await store.aclose()


async def test_the_holders_time_left_is_read_once_then_estimated(etcd_store_url: str) -> None:
    store = EtcdStore.from_url(etcd_store_url)
    recorder = Recorder(store)
    try:
        a, b, c = [await store.open_session(8, OWNER) for _ in range(3)]
        assert isinstance(await store.attempt(a, "t", None, enqueue=True), Grant)
        recorder.take()
        first = await store.attempt(b, "t", None, enqueue=True)
        assert isinstance(first, Busy) and first.holder is not None
        assert recorder.take() == ["kv/txn+put", "lease/timetolive"]
        assert isinstance(first.holder.expires_in, float) and 0 < first.holder.expires_in <= 8
        await anyio.sleep(0.2)
        later = await store.attempt(c, "t", None, enqueue=False)  # another session, same holder
        assert isinstance(later, Busy) and later.holder is not None
        assert recorder.take() == ["kv/txn+put"]  # no timetolive: estimated
        assert isinstance(later.holder.expires_in, float)
        assert 0 < later.holder.expires_in <= first.holder.expires_in - 0.2
        [info] = await store.locks("t")  # asks every time
        # One txn reads the lock's keys and its hold-back key.
        assert recorder.take() == ["kv/txn", "lease/timetolive"] and 0 < info.expires_in <= 8
        assert await store.keep_alive(a) and isinstance(a, EtcdSession)
        store._ttls[str(a.id)] = (1.0, time.monotonic() - 3.0, 8.0)  # read 3 s ago (> TTL/4)
        recorder.take()
        fresh = await store.attempt(c, "t", None, enqueue=False)
        assert isinstance(fresh, Busy) and fresh.holder is not None
        assert recorder.take() == ["kv/txn+put", "lease/timetolive"]
        assert fresh.holder.expires_in > 6  # renewed just now, read again
    finally:
        await store.aclose()


async def test_write_guard_applies_only_while_held(
    etcd_cluster: EtcdCluster, etcd_store_url: str
) -> None:
    target = f"{namespace(etcd_store_url)}/app/config"
    async with tenure.connect_async(etcd_store_url) as a, tenure.connect_async(etcd_store_url) as b:
        store = a.store
        assert isinstance(store, EtcdStore)
        lease = await a.lock("guard", ttl=5).acquire()
        done = await store.guarded_txn("guard", lease.token, [put_op(target, "one")])
        assert done.held and done.revision > lease.token
        await lease.release()
        newer = await b.lock("guard", ttl=5).acquire()
        stale = await store.guarded_txn(
            "guard", lease.token, [put_op(target, "stale")], failure=[get_op(target)]
        )
        assert not stale.held
        kvs = stale.responses[0]["response_range"]["kvs"]
        assert base64.b64decode(kvs[0]["value"]) == b"one"  # the stale write did not apply
        ok = await store.guarded_txn("guard", newer.token, [put_op(target, "two")])
        assert ok.held
        await newer.release()


async def test_request_reads_the_key_a_grant_made(etcd_store_url: str) -> None:
    """``request`` is one call of etcd's API through the store's own gateway: a range read of
    a lock's queue finds the key its grant made, created at the token."""
    async with tenure.connect_async(etcd_store_url) as client:
        store = client.store
        assert isinstance(store, EtcdStore)
        lease = await client.lock("asked", ttl=5).acquire()
        prefix = f"{store.namespace}/locks/asked/".encode()
        body = {"key": b64(prefix), "range_end": b64(prefix_end(prefix))}
        [kv] = (await store.request("kv/range", body))["kvs"]
        assert int(kv["create_revision"]) == lease.token
        assert base64.b64decode(kv["key"]).startswith(prefix)
        await lease.release()
        assert "kvs" not in await store.request("kv/range", body)


async def test_unreachable_endpoints_are_one_line_store_unavailable() -> None:
    """Besides what conformance/test_sessions.py checks on every store: every endpoint, by
    address or by name, is given up on within 3 s."""
    url = f"etcd://127.0.0.1:1,localhost:9/t_{uuid.uuid4().hex}"
    start = time.monotonic()
    async with tenure.connect_async(url) as client:
        with pytest.raises(StoreUnavailable) as raised:
            await client.lock("x", ttl=5).acquire(wait=False)
    assert time.monotonic() - start < 3
    message = str(raised.value)
    assert "\n" not in message and "127.0.0.1:1" in message


@pytest.mark.parametrize(
    "url",
    [
        "etcd://",
        "etcd://h1:notaport",
        "etcd://h1:2379,:2379",
        "etcd://h1:70000",
        "etcd://user@h1:2379",
        "etcd://h1:2379?timeout=1",
        "etcd://h1:2379/bad namespace",
        "etcd://h1:2379/a//b",
    ],
)
def test_malformed_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidArgument, match="etcd store") as raised:
        EtcdStore.from_url(url)
    assert "\n" not in str(raised.value)


def test_url_defaults() -> None:
    assert EtcdStore.from_url("etcd://h1,h2:2380").url == "etcd://h1:2379,h2:2380/tenure"
    assert EtcdStore.from_url("etcd://[::1]:2379/a/b").url == "etcd://[::1]:2379/a/b"


async def test_unreachable_cluster_means_loss_by_the_deadline(
    etcd_cluster: EtcdCluster, etcd_store_url: str
) -> None:
    """Every member paused: no renewal can be confirmed, so the holder loses the lease at its own
    deadline and the body of ``async with`` stops — no silent extension."""
    reached_end = False
    async with tenure.connect_async(etcd_store_url) as client:
        try:
            with pytest.raises(LeaseLost):
                async with client.lock("cut-off", ttl=2) as lease:
                    start = anyio.current_time()
                    for member in etcd_cluster.members:
                        member.pause()
                    await anyio.sleep(10)
                    reached_end = True
            stopped_after = anyio.current_time() - start
        finally:
            etcd_cluster.healthy()  # resume every member and wait until they answer
        assert not reached_end
        assert lease.lost
        assert stopped_after < 2.0, stopped_after  # by its deadline: before the TTL is up


# -- leader election: proclaim and watch ---------------------------------------------------------


def holders(changes: list[Change]) -> list[tuple[int, str | None] | None]:
    return [None if c.holder is None else (c.holder.token, c.holder.value) for c in changes]


async def test_watch_reports_an_expired_holder_handing_over_but_not_the_queue(
    etcd_store_url: str,
) -> None:
    store = EtcdStore.from_url(etcd_store_url)
    watch = await store.watch("exp")
    try:
        one = await store.open_session(1, OWNER)  # never kept alive: etcd expires it
        two, three = [await store.open_session(10, OWNER) for _ in range(2)]
        first = await store.attempt(one, "exp", None, enqueue=True)
        queued = await store.attempt(two, "exp", None, enqueue=True)
        passing = await store.attempt(three, "exp", None, enqueue=True)
        assert isinstance(first, Grant) and isinstance(queued, Busy)
        assert isinstance(queued.ticket, EtcdTicket) and isinstance(passing, Busy)
        await store.leave(passing.ticket)  # waiters coming and going change no holder
        with anyio.fail_after(10):
            changes = await watch.next(5)
            while len(changes) < 2:
                changes += await watch.next(5)
        assert holders(changes) == [(first.token, None), (queued.ticket.revision, None)]
        assert changes[1].holder is not None and changes[1].holder.waiters == 0
        assert await watch.next(0.3) == []
    finally:
        await watch.aclose()
        await store.aclose()


async def test_etcd_itself_refuses_a_proclaim_from_another_lease(etcd_store_url: str) -> None:
    store = EtcdStore.from_url(etcd_store_url)
    try:
        one, two = [await store.open_session(10, OWNER) for _ in range(2)]
        assert isinstance(one, EtcdSession) and isinstance(two, EtcdSession)
        granted = await store.attempt(one, "forged", None, enqueue=False)
        assert isinstance(granted, Grant)
        # Two forges one's grant locally: only the compare on the key's lease stops it.
        two.held[("forged", granted.token)] = one.held[("forged", granted.token)]
        assert not await store.proclaim(two, "forged", granted.token, "usurper")
        assert await store.proclaim(one, "forged", granted.token, "mine")
        [info] = await store.locks("forged")
        assert (info.token, info.value, info.holder) == (granted.token, "mine", OWNER)
    finally:
        await store.aclose()


async def test_a_compacted_watch_reports_the_current_state_once(
    etcd_cluster: EtcdCluster, etcd_store_url: str
) -> None:
    store = EtcdStore.from_url(etcd_store_url)
    watch = await store.watch("cmp")
    try:
        one, two = [await store.open_session(10, OWNER) for _ in range(2)]
        first = await store.attempt(one, "cmp", None, enqueue=False)
        assert isinstance(first, Grant)
        assert await store.proclaim(one, "cmp", first.token, "a")
        await store.release(one, "cmp", first.token)
        second = await store.attempt(two, "cmp", None, enqueue=False)
        assert isinstance(second, Grant)
        assert await store.proclaim(two, "cmp", second.token, "b")
        member = etcd_cluster.members[0]
        header = member.request("/v3/kv/range", {"key": b64("-")})["header"]
        assert isinstance(header, dict)
        member.request("/v3/kv/compaction", {"revision": header["revision"], "physical": True})
        # The watch's revision is gone: one change, the state now; the gap's changes are lost.
        assert holders(await watch.next(5)) == [(second.token, "b")]
        assert await store.proclaim(two, "cmp", second.token, "c")
        assert holders(await watch.next(5)) == [(second.token, "c")]
    finally:
        await watch.aclose()
        await store.aclose()


async def test_closing_a_watch_ends_a_waiting_next(etcd_store_url: str) -> None:
    store = EtcdStore.from_url(etcd_store_url)
    watch = await store.watch("idle")
    got: list[list[Change]] = []
    try:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:

                async def waiting() -> None:
                    got.append(await watch.next(60))

                tg.start_soon(waiting)
                await anyio.sleep(0.3)
                await watch.aclose()
        assert got == [[]]
    finally:
        await watch.aclose()
        await store.aclose()


async def test_the_hold_back_key_lives_on_its_own_lease_beside_the_queue(
    etcd_cluster: EtcdCluster, etcd_store_url: str
) -> None:
    """Lock-delay on etcd: the grant puts ``<ns>/locks/<name>`` (in no queue's range) on the
    hold-back lease, whose TTL is the session's plus the delay; a release deletes it; once the
    session lease has expired, closing the session leaves it to its own lease."""
    store = EtcdStore.from_url(etcd_store_url)
    member = etcd_cluster.members[0]
    ns = namespace(etcd_store_url)
    try:
        session = await store.open_session(1, OWNER, 2.0)
        assert isinstance(session, EtcdSession) and session.hold
        ttl = member.request("/v3/lease/timetolive", {"ID": str(session.hold)})
        assert ttl["grantedTTL"] == "3"  # 1 s + 2 s, whole seconds
        first = await store.attempt(session, "h", None, enqueue=True)
        assert isinstance(first, Grant)
        assert [k for k, _ in keys_under(member, f"{ns}/locks/")] == [
            f"{ns}/locks/h",
            f"{ns}/locks/h/{session.id:016x}",
        ]
        await store.release(session, "h", first.token)
        assert keys_under(member, f"{ns}/locks/") == []
        second = await store.attempt(session, "h", None, enqueue=False)
        assert isinstance(second, Grant)
        with anyio.fail_after(5):  # no keep-alive: the session lease expires, not the other
            while await store.locks("h"):
                await anyio.sleep(0.05)
        await store.close_session(session)  # too late to be a clean end
        [held] = await store.lock_delays("h")
        assert held.token == second.token and 0 < held.free_in <= 2.5
    finally:
        await store.aclose()
