"""What only the Redis stores must show: compare-by-token release, a counter that is never
deleted, growing tokens, dead waiters skipped, hand-over by push, no trace when busy, redacted
passwords, the server's clock judging expiry and lock-delay (hold-back keys); and for Redlock: a
quorum of three, refused without one, tokens that keep growing when the quorum changes, and a
lock-delay held until a quorum lets go. Real ``redis-server``
processes only (plugin_redis's shared servers, or a test's own)."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

import tenure
from plugin_redis import fresh_prefix, redlock_healthy
from tenure import InvalidArgument, StoreUnavailable
from tenure._url import open_store
from tenure.stores._clockshift import CLOCKSHIFT_FILE, clockshift_library
from tenure.stores._spi import Busy, Grant, Revocation, Session, Store
from tenure.stores.redis import RedisStore, RedlockStore
from tenure.stores.redis.server import RedisServer
from tenure.stores.redis.session import RedisSession, RedisTicket

pytestmark = pytest.mark.anyio
OWNER = tenure.Holder("test", os.getpid())


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def store(redis_store_url: str) -> AsyncIterator[RedisStore]:
    store = open_store(redis_store_url)
    assert isinstance(store, RedisStore)
    try:
        yield store
    finally:
        await store.aclose()


async def grant(store: Store, session: Session, name: str) -> int:
    outcome = await store.attempt(session, name, None, False)
    assert isinstance(outcome, Grant), outcome
    return outcome.token


async def until_gone(server: RedisServer, key: str) -> None:
    """Wait until the server has expired ``key`` (its PX ran out)."""
    with anyio.fail_after(10):
        while server.command("EXISTS", key) != "0":
            await anyio.sleep(0.02)


# -- one server ------------------------------------------------------------------------------


async def test_a_stale_release_never_deletes_the_next_holders_lock(
    store: RedisStore, redis_server: RedisServer
) -> None:
    """Besides what conformance/test_locks.py checks on every store: the release script itself
    compares the token, even called with the next holder's own session."""
    first = await store.open_session(0.3, OWNER)  # never kept alive: it expires
    second = await store.open_session(10, OWNER)
    try:
        old = await grant(store, first, "stale")
        await until_gone(redis_server, f"{store.prefix}:s:{first.id}")  # type: ignore[attr-defined]
        new = await grant(store, second, "stale")
        assert new > old
        await store.release(first, "stale", old)  # the paused holder wakes up and releases
        # ...and the script itself compares the token, whatever the client remembers:
        stale = await store.instance.call("release", second.id, "stale", str(old), "")  # type: ignore[attr-defined]
        assert stale == 0
        [info] = await store.locks("stale")
        assert info.token == new
    finally:
        await store.close_session(first)
        await store.close_session(second)


async def test_the_counter_key_survives_release_and_tokens_only_grow(
    store: RedisStore, redis_server: RedisServer
) -> None:
    sessions = [await store.open_session(10, OWNER) for _ in range(2)]
    tokens = []
    try:
        for index in range(40):
            session = sessions[index % 2]
            token = await grant(store, session, "n")
            tokens.append(token)
            await store.release(session, "n", token)
            assert redis_server.command("EXISTS", f"{store.prefix}:l:n") == "0"
            assert redis_server.command("GET", f"{store.prefix}:c:n") == str(token)
        await store.close_session(sessions[0])
        assert redis_server.command("PTTL", f"{store.prefix}:c:n") == "-1"  # never expires
    finally:
        for session in sessions:
            await store.close_session(session)
    assert tokens == sorted(set(tokens)) and len(tokens) == 40


async def test_a_waiter_whose_session_died_is_skipped(
    store: RedisStore, redis_server: RedisServer
) -> None:
    """Besides what conformance/test_queue.py checks on every store: the release hands the
    lock past the dead waiter and pushes the token to the live one."""
    holder = await store.open_session(10, tenure.Holder("h", 1, "holder"))
    dead = await store.open_session(0.3, tenure.Holder("h", 2, "dead"))  # not kept alive
    alive = await store.open_session(10, tenure.Holder("h", 3, "alive"))
    try:
        token = await grant(store, holder, "skip")
        first = await store.attempt(dead, "skip", None, True)
        second = await store.attempt(alive, "skip", None, True)
        assert isinstance(first, Busy) and isinstance(second, Busy)
        assert second.ticket is not None
        await until_gone(redis_server, f"{store.prefix}:s:{dead.id}")  # type: ignore[attr-defined]
        await store.release(holder, "skip", token)
        # The release handed the lock to the live waiter and pushed it the token: no attempt
        # round trip is needed to learn it.
        await store.wait(second.ticket, second, 5)
        assert isinstance(second.ticket, RedisTicket) and second.ticket.handed is not None
        outcome = await store.attempt(alive, "skip", second.ticket, True)
        assert isinstance(outcome, Grant) and outcome.token > token
        [info] = await store.locks("skip")
        assert info.holder.label == "alive" and info.waiters == 0
    finally:
        for session in (holder, dead, alive):
            await store.close_session(session)


async def test_a_clients_waiters_share_one_blocking_connection(
    redis_store_url: str, redis_server: RedisServer
) -> None:
    """Twenty waiters of one client (one session) block on one connection, not one each, and
    each is handed the lock in turn by its push."""

    def popping() -> int:
        return redis_server.command("CLIENT", "LIST").count(" cmd=blpop ")

    before = popping()
    async with tenure.connect_async(redis_store_url) as holding:
        lease = await holding.lock("shared", ttl=10).acquire()
        async with tenure.connect_async(redis_store_url) as client:
            order: list[int] = []

            async def wait_for_it() -> None:
                got = await client.lock("shared", ttl=10).acquire()
                order.append(got.token)
                await got.release()

            with anyio.fail_after(20):
                async with anyio.create_task_group() as tg:
                    for _ in range(20):
                        tg.start_soon(wait_for_it)
                    while not (infos := await holding.locks("shared")) or infos[0].waiters < 20:
                        await anyio.sleep(0.02)
                    while popping() == before:  # the reader's BLPOP is out (awaited, not assumed)
                        await anyio.sleep(0.02)
                    await anyio.sleep(0.2)  # room for more: one a waiter, on the old script
                    assert popping() - before == 1
                    await lease.release()
            assert order == list(range(lease.token + 1, lease.token + 21))


async def test_a_hand_over_revoked_before_its_waiter_read_it_is_not_taken(
    store: RedisStore, redis_server: RedisServer
) -> None:
    """A waiter takes a pushed token without asking again, so a push whose grant ended before
    the waiter read it (revoked here) is taken back with the grant."""
    holder = await store.open_session(10, OWNER)
    waiter = await store.open_session(10, OWNER)
    wake_list = f"{store.prefix}:w:{waiter.id}"  # type: ignore[attr-defined]
    try:
        token = await grant(store, holder, "stale")
        busy = await store.attempt(waiter, "stale", None, True)
        assert isinstance(busy, Busy) and isinstance(busy.ticket, RedisTicket)
        await store.release(holder, "stale", token)  # handed to the waiter; nobody reads yet
        assert redis_server.command("LLEN", wake_list) == "1"
        record = Revocation("stale", 0, OWNER, "test", time.time(), "stale push", now=True)
        revoked = await store.revoke("stale", token + 1, record)
        assert revoked is not None and revoked.token == token + 1
        assert redis_server.command("LLEN", wake_list) == "0"
        with anyio.move_on_after(0.5):
            await store.wait(busy.ticket, busy, 0.5)
        assert busy.ticket.handed is None
        again = await store.attempt(waiter, "stale", busy.ticket, True)
        assert isinstance(again, Grant) and again.token == token + 2
    finally:
        await store.close_session(holder)
        await store.close_session(waiter)


async def test_a_busy_attempt_that_will_not_wait_leaves_no_trace(
    store: RedisStore, redis_server: RedisServer
) -> None:
    """Besides what conformance/test_queue.py checks on every store: neither a queue key nor
    the session's wake-up list is made."""
    one = await store.open_session(10, OWNER)
    two = await store.open_session(10, OWNER)
    try:
        await grant(store, one, "busy")
        outcome = await store.attempt(two, "busy", None, False)
        assert isinstance(outcome, Busy) and outcome.ticket is None
        assert redis_server.command("EXISTS", f"{store.prefix}:q:busy") == "0"
        assert redis_server.command("EXISTS", f"{store.prefix}:n:{two.id}") == "0"  # type: ignore[attr-defined]
    finally:
        await store.close_session(one)
        await store.close_session(two)


async def test_the_servers_clock_judges_expiry() -> None:
    """A jump of the server's wall clock (clockshift.c) expires a session early: why Redis is
    efficiency-grade."""
    with RedisServer(clock_shift=True) as server:
        store = RedisStore.from_url(server.url)
        try:
            session = await store.open_session(30, OWNER)
            token = await grant(store, session, "clock")
            server.clock_jump(20)  # less than the TTL: the session still holds
            assert await store.keep_alive(session)
            assert [info.token for info in await store.locks("clock")] == [token]
            server.clock_jump(60)  # more than the TTL since the last keep-alive
            assert not await store.keep_alive(session)  # gone after 0 s of real time
            assert await store.locks("clock") == []
            other = await store.open_session(30, OWNER)
            assert await grant(store, other, "clock") > token
        finally:
            await store.aclose()


async def test_a_hold_back_outlives_its_session_by_the_lock_delay(
    store: RedisStore, redis_server: RedisServer
) -> None:
    def pttl(kind: str, ident: str) -> int:
        return int(redis_server.command("PTTL", f"{store.prefix}:{kind}:{ident}"))

    session = await store.open_session(10, OWNER, 3.0)
    assert isinstance(session, RedisSession)
    try:
        token = await grant(store, session, "hb")
        for _ in range(2):  # after the grant, then after a renewal
            session_left = pttl("s", session.id)  # read first: the difference can only shrink
            # Redis samples its clock per script or event-loop pass, not per read: two PTTLs can
            # disagree by a millisecond of sampling (seen in CI: 3_001), never by the lock delay.
            assert 2_900 < pttl("h", "hb") - session_left <= 3_002
            assert redis_server.command("GET", f"{store.prefix}:h:hb") == str(token)
            assert await store.lock_delays() == []  # held, not held back
            assert await store.keep_alive(session)
        await store.release(session, "hb", token)  # a clean release frees the name at once
        assert pttl("h", "hb") == -2
        await grant(store, session, "hb")
        await store.close_session(session)  # and so does closing the session
        assert pttl("h", "hb") == -2 and pttl("d", session.id) == -2
    finally:
        await store.close_session(session)


async def test_a_session_of_the_earlier_protocol_has_no_lock_delay(
    store: RedisStore, redis_server: RedisServer
) -> None:
    """A session opened before lock-delay existed (``open`` with no delay) keeps working, and
    its locks are free at once when it expires."""
    old = RedisSession("0ld5e55i0n", 0.3, '{"host": "old", "pid": 1, "label": ""}')
    await store.instance.call("open", old.id, "300", old.owner)
    new = await store.open_session(10, OWNER)
    try:
        token = await grant(store, old, "old")
        await until_gone(redis_server, f"{store.prefix}:s:{old.id}")
        assert await store.lock_delays("old") == []
        assert await grant(store, new, "old") > token
    finally:
        await store.close_session(new)


async def test_the_servers_clock_judges_the_lock_delay() -> None:
    """The hold-back expires by the server's wall clock: a jump of it ends the delay early (the
    caveat in the notes), and the delay is over when the server's clock says so, not before."""
    with RedisServer(clock_shift=True) as server:
        store = RedisStore.from_url(server.url)
        try:
            dead = await store.open_session(0.3, OWNER, 30)  # never kept alive
            token = await grant(store, dead, "delay")
            await until_gone(server, f"{store.prefix}:s:{dead.id}")  # type: ignore[attr-defined]
            live = await store.open_session(300, OWNER)
            busy = await store.attempt(live, "delay", None, False)
            assert isinstance(busy, Busy) and busy.holder is None
            assert busy.retry_in is not None and 25 < busy.retry_in <= 30.1
            server.clock_jump(20)
            busy = await store.attempt(live, "delay", None, False)
            assert isinstance(busy, Busy) and busy.retry_in is not None and busy.retry_in <= 10.1
            [held] = await store.lock_delays()
            assert held.name == "delay" and held.token == token and 5 < held.free_in <= 10.1
            server.clock_jump(15)
            assert await grant(store, live, "delay") > token
        finally:
            await store.aclose()


def test_the_clock_shift_moves_the_wall_clock_only(tmp_path: Path) -> None:
    """clockshift.c shifts time.time() (CLOCK_REALTIME) by the file's offset, read afresh on
    every call, and leaves time.monotonic() (CLOCK_MONOTONIC) alone."""
    offset = tmp_path / "offset"
    offset.write_bytes(struct.pack("=q", 3600 * 10**9))
    script = (
        "import struct, sys, time\n"
        "before = time.time(), time.monotonic()\n"
        "open(sys.argv[1], 'r+b').write(struct.pack('=q', -7200 * 10**9))\n"
        "print(*before, time.time(), time.monotonic())\n"
    )
    env = dict(os.environ, LD_PRELOAD=str(clockshift_library()), **{CLOCKSHIFT_FILE: str(offset)})
    wall, mono = time.time(), time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", script, str(offset)], env=env, capture_output=True, check=True
    )
    shifted, shifted_mono, jumped, jumped_mono = map(float, out.stdout.split())
    assert 3500 < shifted - wall < 3700  # an hour ahead...
    assert -7300 < jumped - time.time() < -7100  # ...then two hours behind, while it ran
    assert mono <= shifted_mono <= jumped_mono <= time.monotonic()  # one monotonic clock


async def test_a_replica_promoted_after_a_grant_forgets_what_it_never_got() -> None:
    """Asynchronous replication: writes the replica missed are lost by a fail-over."""
    with RedisServer() as primary, RedisServer(replica_of=primary) as replica:
        with anyio.fail_after(10):
            while "master_link_status:up" not in replica.command("INFO", "replication"):
                await anyio.sleep(0.05)
        # The fail-over happens before the grant reaches the replica (the replication lag,
        # made certain): the replica is promoted, the old primary still grants.
        replica.promote()
        store = RedisStore.from_url(primary.url)
        try:
            session = await store.open_session(30, OWNER)
            token = await grant(store, session, "f")
        finally:
            await store.aclose()
        primary.kill()
        promoted = RedisStore.from_url(replica.url)
        try:
            assert await promoted.locks("f") == []  # the lock is gone...
            other = await promoted.open_session(30, OWNER)
            again = await grant(promoted, other, "f")
            assert again <= token  # ...and the token did not grow
        finally:
            await promoted.aclose()


async def test_passwords_are_used_and_never_shown() -> None:
    for url in (
        "redis://user:s3cret@127.0.0.1:6379/0",
        "rediss://:s3cret@127.0.0.1/2?prefix=p",
        "redlock://:s3cret@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3",
    ):
        assert "s3cret" not in open_store(url).url and "***" in open_store(url).url
    for bad in ("redis://:s3cret@127.0.0.1:6379/x", "redis://:s3cret@h/0?db=1"):
        with pytest.raises(InvalidArgument) as raised:
            open_store(bad)
        assert "s3cret" not in str(raised.value) and "\n" not in str(raised.value)
    with RedisServer(password="s3cret-pw") as server:
        async with tenure.connect_async(server.url) as client:
            lease = await client.lock("pw", ttl=5).acquire()
            assert "s3cret" not in client.store.url
            await lease.release()
        wrong = server.url.replace("s3cret-pw", "wrong-pw")
        with pytest.raises(StoreUnavailable) as raised:
            async with tenure.connect_async(wrong) as client:
                await client.lock("pw", ttl=5).acquire()
        assert "pw" not in str(raised.value).replace("'pw'", "")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://127.0.0.1:6379,127.0.0.1:6380/0", "one host"),
        ("redis://127.0.0.1:99999/0", "bad port"),
        ("redis://127.0.0.1/0?prefix=a*b", "bad prefix"),
        ("redis://127.0.0.1/0?timeout=3", "unknown option"),
        ("redlock://127.0.0.1:1,127.0.0.1:1", "twice"),
    ],
)
def test_bad_urls_are_one_line(url: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message) as raised:
        open_store(url)
    assert "\n" not in str(raised.value)


def test_both_are_labelled_efficiency_grade() -> None:
    for store in (RedisStore, RedlockStore):
        caps = store.capabilities
        assert caps.grade == "efficiency" and not caps.durable_tokens
        assert caps.store_judges_expiry and caps.fair and caps.native_wait
        assert "not for correctness" in caps.notes


# -- Redlock ---------------------------------------------------------------------------------


def redlock_url(servers: list[RedisServer], prefix: str) -> str:
    return f"redlock://{','.join(s.endpoint for s in servers)}/0?prefix={prefix}"


async def one_grant(url: str, name: str = "r") -> int:
    """A grant by a fresh store (no token floor remembered by the client), released at once."""
    store = RedlockStore.from_url(url)
    try:
        session = await store.open_session(5, OWNER)
        try:
            token = await grant(store, session, name)
            await store.release(session, name, token)
            return token
        finally:
            await store.close_session(session)
    finally:
        await store.aclose()


async def test_redlock_grants_with_one_of_three_down_and_refuses_with_two(
    redlock_servers: list[RedisServer],
) -> None:
    url = redlock_url(redlock_servers, fresh_prefix())
    try:
        before = await one_grant(url)
        redlock_servers[2].kill()
        async with tenure.connect_async(url) as client:
            lease = await client.lock("r", ttl=5).acquire(wait=False)
            assert lease.token > before
            [info] = await client.locks("r")
            assert info.token == lease.token
            await lease.release()
        store = RedlockStore.from_url(url)
        try:
            session = await store.open_session(5, OWNER)
            redlock_servers[1].kill()
            with pytest.raises(StoreUnavailable, match="quorum 2"):
                await store.attempt(session, "r", None, True)
            with pytest.raises(StoreUnavailable, match="quorum"):
                await store.open_session(5, OWNER)
        finally:
            await store.aclose()
        with pytest.raises(StoreUnavailable):
            async with tenure.connect_async(url) as client:
                await client.lock("r", ttl=5).acquire(wait=False)
    finally:
        redlock_healthy(redlock_servers)


async def test_redlock_tokens_grow_when_the_quorum_changes(
    redlock_servers: list[RedisServer],
) -> None:
    """Servers restarted without persistence come back with no counter; the quorum's maximum,
    raised onto every server of the quorum, still grows, even though each grant is made by a
    fresh client that remembers no earlier token."""
    a, b, c = redlock_servers
    url = redlock_url(redlock_servers, fresh_prefix())
    tokens = [await one_grant(url)]
    try:
        c.kill()
        tokens += [await one_grant(url) for _ in range(3)]  # a and b run ahead of c
        c.start()  # empty: its counter is gone
        a.kill()
        tokens.append(await one_grant(url))  # quorum b, c: c is raised to b's counter
        a.start()  # empty
        b.kill()
        tokens.append(await one_grant(url))  # quorum a, c: only c remembers, and it suffices
        assert tokens == sorted(set(tokens)), tokens
    finally:
        redlock_healthy(redlock_servers)


async def test_redlock_holds_back_until_a_quorum_of_servers_lets_go(
    redlock_servers: list[RedisServer],
) -> None:
    """Each server keeps its own hold-back: one server restarted empty cannot grant alone, two
    can (a restart without persistence loses the lock-delay, as it loses locks)."""
    _, b, c = redlock_servers
    store = RedlockStore.from_url(redlock_url(redlock_servers, fresh_prefix()))
    try:
        dead = await store.open_session(0.5, OWNER, 60)  # never kept alive
        token = await grant(store, dead, "rd")
        with anyio.fail_after(10):
            while await store.locks("rd"):
                await anyio.sleep(0.05)
        c.kill()
        c.start()  # empty: it forgot its hold-back
        live = await store.open_session(30, OWNER)
        busy = await store.attempt(live, "rd", None, False)
        assert isinstance(busy, Busy) and busy.holder is None and busy.ticket is None
        assert busy.retry_in is not None and 50 < busy.retry_in <= 60.1
        [held] = await store.lock_delays()
        assert held.name == "rd" and held.token == token and 50 < held.free_in <= 60
        b.kill()
        b.start()  # now only one server holds back: a quorum grants
        assert await store.lock_delays("rd") == []
        later = await store.open_session(30, OWNER)  # b forgot the sessions too
        assert await grant(store, later, "rd") > token
        await store.close_session(later)
    finally:
        await store.aclose()
        redlock_healthy(redlock_servers)


async def test_redlock_waiters_are_handed_the_lock_in_order(
    redlock_servers: list[RedisServer],
) -> None:
    url = redlock_url(redlock_servers, fresh_prefix())
    store = RedlockStore.from_url(url)
    sessions = [await store.open_session(10, tenure.Holder("h", i, f"s{i}")) for i in range(3)]
    try:
        token = await grant(store, sessions[0], "q")
        waiting = [await store.attempt(s, "q", None, True) for s in sessions[1:]]
        assert all(isinstance(w, Busy) and w.ticket is not None for w in waiting)
        await store.release(sessions[0], "q", token)
        first = waiting[0]
        assert isinstance(first, Busy)
        with anyio.fail_after(5):
            while not isinstance(
                outcome := await store.attempt(sessions[1], "q", first.ticket, True), Grant
            ):
                first = outcome
                await store.wait(first.ticket, first, 1)
        assert outcome.token > token
        [info] = await store.locks("q")
        assert info.holder.label == "s1" and info.waiters == 1
    finally:
        for session in sessions:
            await store.close_session(session)
        await store.aclose()
