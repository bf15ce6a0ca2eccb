"""What only the PostgreSQL store must show: tokens durable across server restarts and crashes,
expiry by the server's clock, one NOTIFY per release, a killed waiter skipped by its channel,
loss when the server dies, reconnection, and one-line errors for bad URLs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import AsyncExitStack
from typing import Any
from uuid import uuid4

import anyio
import psycopg
import pytest

import tenure
from tenure import AsyncClient, InvalidArgument, LeaseLost, StoreUnavailable
from tenure.stores._spi import Busy, Grant
from tenure.stores.postgres import PostgresStore
from tenure.stores.postgres.server import PostgresServer
from tenure.stores.postgres.watch import PostgresWatch

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def own_server() -> Iterator[PostgresServer]:
    """A server of this module's own, which its tests stop, kill and start again."""
    missing = PostgresServer.missing()
    if missing:
        pytest.skip(f"PostgreSQL binaries not found: {', '.join(missing)}")
    with PostgresServer() as server:
        yield server


def fresh_url(server: PostgresServer) -> tuple[str, str]:
    schema = f"t_{uuid4().hex[:12]}"
    return f"{server.dsn}?schema={schema}", schema


def store_of(client: AsyncClient) -> PostgresStore:
    assert isinstance(client.store, PostgresStore)
    return client.store


async def wait_until_waiters(client: AsyncClient, name: str, count: int) -> None:
    with anyio.fail_after(10):
        while True:
            infos = await client.locks(name)
            if infos and infos[0].waiters >= count:
                return
            await anyio.sleep(0.01)


# -- durability ---------------------------------------------------------------------------


async def test_tokens_strictly_increase_across_restart_and_crash(
    own_server: PostgresServer,
) -> None:
    own_server.start()
    url, _ = fresh_url(own_server)
    tokens: list[int] = []
    async with tenure.connect_async(url) as client:
        for _ in range(3):
            async with client.lock("durable", ttl=5) as lease:
                tokens.append(lease.token)
    own_server.stop()  # clean shutdown
    own_server.start()
    async with tenure.connect_async(url) as client:
        # A grant, then at once a crash: the token was committed before it was returned.
        held = await client.lock("durable", ttl=1).acquire()
        tokens.append(held.token)
        own_server.kill()
        own_server.start()
    async with tenure.connect_async(url) as client:
        # The crashed holder's session row survived; it expires by the server's clock (1 s).
        with anyio.fail_after(10):
            async with client.lock("durable", ttl=5) as lease:
                tokens.append(lease.token)
    assert tokens == sorted(set(tokens)) and len(tokens) == 5, tokens


# -- the server's clock -------------------------------------------------------------------


async def test_expiry_is_judged_by_the_servers_clock(postgres: PostgresServer) -> None:
    url, schema = fresh_url(postgres)
    # No lock-delay: this test is about expiry (the delay's clock is tested below).
    async with tenure.connect_async(url, lock_delay=0) as a, tenure.connect_async(url) as b:
        held = await a.lock("clock", ttl=3).acquire()
        with pytest.raises(tenure.NotAcquired):
            await b.lock("clock", ttl=3).acquire(wait=False)
        # The client still counts about 3 s; the server says the session expired a second ago.
        with psycopg.connect(postgres.dsn, autocommit=True) as db:
            db.execute(
                psycopg.sql.SQL(
                    "UPDATE {}.sessions SET expires = now() - interval '1 second'"
                ).format(psycopg.sql.Identifier(schema))
            )
        assert held.remaining() > 1
        second = await b.lock("clock", ttl=3).acquire(wait=False)
        assert second.token > held.token
        # ...and the holder hears it at its next renewal (every ttl/3), before its deadline.
        with anyio.fail_after(1.5):
            while not held.lost:
                await anyio.sleep(0.01)
        assert "gone" in (held.lost_reason or "")
        await second.release()


async def test_newer_schema_version_is_refused(postgres: PostgresServer) -> None:
    url, schema = fresh_url(postgres)
    async with tenure.connect_async(url) as client:
        assert await client.locks() == []
    with psycopg.connect(postgres.dsn, autocommit=True) as db:
        db.execute(
            psycopg.sql.SQL("UPDATE {}.meta SET value = '5' WHERE key = 'schema'").format(
                psycopg.sql.Identifier(schema)
            )
        )
    async with tenure.connect_async(url) as client:
        with pytest.raises(StoreUnavailable, match="version 5"):
            await client.locks()


SCHEMA_V1 = """
CREATE SCHEMA {s};
CREATE TABLE {s}.meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE {s}.sessions (
    id bigserial PRIMARY KEY, expires timestamptz NOT NULL, ttl float8 NOT NULL,
    host text NOT NULL, pid integer NOT NULL, label text NOT NULL);
CREATE TABLE {s}.tokens (name text PRIMARY KEY, last bigint NOT NULL);
CREATE TABLE {s}.locks (
    name text PRIMARY KEY, token bigint NOT NULL, session bigint NOT NULL, waiter bigint);
CREATE TABLE {s}.waiters (
    seq bigserial PRIMARY KEY, name text NOT NULL, session bigint NOT NULL,
    channel text NOT NULL, listener integer NOT NULL);
INSERT INTO {s}.meta (key, value) VALUES ('schema', '1');
INSERT INTO {s}.tokens (name, last) VALUES ('old', 7);
"""


async def test_version_1_schema_is_migrated_and_its_counters_kept(
    postgres: PostgresServer,
) -> None:
    url, schema = fresh_url(postgres)
    ident = psycopg.sql.Identifier(schema)
    with psycopg.connect(postgres.dsn, autocommit=True) as db:
        db.execute(psycopg.sql.SQL(SCHEMA_V1).format(s=ident))
    async with tenure.connect_async(url) as client, client.lock("old", ttl=5) as lease:
        assert lease.token == 8
    with psycopg.connect(postgres.dsn, autocommit=True) as db:
        query = psycopg.sql.SQL("SELECT value FROM {}.meta WHERE key = 'schema'").format(ident)
        assert db.execute(query).fetchone() == ("4",)


async def test_version_2_schema_is_upgraded_for_leader_election(postgres: PostgresServer) -> None:
    """Version 3 adds a column, a table and functions to version 2, and replaces the bodies of
    its functions (same signatures, so version-2 clients still connected keep working)."""
    url, schema = fresh_url(postgres)
    ident = psycopg.sql.Identifier(schema)
    async with tenure.connect_async(url) as client:
        held = await client.lock("kept", ttl=30).acquire()
        with psycopg.connect(postgres.dsn, autocommit=True) as db:  # back to version 2
            db.execute(
                psycopg.sql.SQL(
                    "ALTER TABLE {s}.locks DROP COLUMN value; DROP TABLE {s}.watchers;"
                    " DROP FUNCTION {s}.announce, {s}.proclaim, {s}.watch;"
                    " UPDATE {s}.meta SET value = '2' WHERE key = 'schema'"
                ).format(s=ident)
            )
        store = PostgresStore.from_url(url)
        try:
            [info] = await store.locks("kept")  # upgrades on connecting
            assert (info.token, info.value) == (held.token, None)
            session = await store.open_session(30, tenure.Holder("test", 1))
            outcome = await store.attempt(session, "new", None, enqueue=False)
            assert isinstance(outcome, tenure.stores._spi.Grant)
            assert await store.proclaim(session, "new", outcome.token, "after the upgrade")
            [info] = await store.locks("new")
            assert info.value == "after the upgrade"
        finally:
            await store.aclose()
        await held.release()


async def test_version_3_schema_is_upgraded_for_lock_delay(postgres: PostgresServer) -> None:
    """Version 4 adds a column with a default, a table and a trigger to version 3 and replaces
    function bodies (same signatures): a lock taken before the upgrade is kept."""
    url, schema = fresh_url(postgres)
    ident = psycopg.sql.Identifier(schema)
    async with tenure.connect_async(url) as client:
        held = await client.lock("kept", ttl=30).acquire()
        with psycopg.connect(postgres.dsn, autocommit=True) as db:  # back to version 3
            db.execute(
                psycopg.sql.SQL(
                    "DROP TRIGGER sessions_hold_back ON {s}.sessions; DROP FUNCTION {s}.hold_back;"
                    " DROP TABLE {s}.held; ALTER TABLE {s}.sessions DROP COLUMN lock_delay;"
                    " UPDATE {s}.meta SET value = '3' WHERE key = 'schema'"
                ).format(s=ident)
            )
        store = PostgresStore.from_url(url)
        try:
            [info] = await store.locks("kept")  # upgrades on connecting
            assert info.token == held.token
            assert await store.lock_delays() == []
            session = await store.open_session(30, tenure.Holder("test", 1), lock_delay=5)
            outcome = await store.attempt(session, "new", None, enqueue=False)
            assert isinstance(outcome, Grant)
            await store.close_session(session)
        finally:
            await store.aclose()
        await held.release()
    with psycopg.connect(postgres.dsn, autocommit=True) as db:
        query = psycopg.sql.SQL("SELECT value FROM {}.meta WHERE key = 'schema'").format(ident)
        assert db.execute(query).fetchone() == ("4",)


# -- lock-delay -------------------------------------------------------------------------------


async def test_lock_delay_is_judged_by_the_servers_clock_and_outlives_the_sweep(
    postgres: PostgresServer,
) -> None:
    """The session's end and its delay are the server's: sessions made to have expired a
    second ago by the server's clock hold their names back 4 s more. A late release or close
    frees nothing, and a sweep keeps the delay, even one made by a plain DELETE (as an older
    client's)."""
    url, schema = fresh_url(postgres)
    ident = psycopg.sql.Identifier(schema)
    store = PostgresStore.from_url(url)
    try:
        grants = {}
        for name in ("closed", "swept"):
            dead = await store.open_session(30, tenure.Holder("test", 1), lock_delay=5)
            grant = await store.attempt(dead, name, None, enqueue=False)
            assert isinstance(grant, Grant)
            grants[name] = (dead, grant.token)
        with psycopg.connect(postgres.dsn, autocommit=True) as db:
            db.execute(
                psycopg.sql.SQL(
                    "UPDATE {}.sessions SET expires = now() - interval '1 second'"
                ).format(ident)
            )
        [held] = await store.lock_delays("closed")
        assert held.token == grants["closed"][1] and 2 < held.free_in <= 4
        dead, token = grants["closed"]
        await store.release(dead, "closed", token)  # too late: it ended without a release
        await store.close_session(dead)  # deletes the session row: the trigger keeps the name
        with psycopg.connect(postgres.dsn, autocommit=True) as db:
            db.execute(psycopg.sql.SQL("DELETE FROM {}.sessions").format(ident))
            rows = db.execute(
                psycopg.sql.SQL("SELECT name FROM {} ORDER BY name").format(
                    psycopg.sql.Identifier(schema, "held")
                )
            )
            assert rows.fetchall() == [("closed",), ("swept",)]
        live = await store.open_session(30, tenure.Holder("test", 2))
        for name in ("closed", "swept"):
            busy = await store.attempt(live, name, None, enqueue=False)
            assert isinstance(busy, Busy) and busy.holder is None
            assert busy.retry_in is not None and 2 < busy.retry_in <= 4
        assert [h.name for h in await store.lock_delays()] == ["closed", "swept"]
        await store.close_session(live)
    finally:
        await store.aclose()


# -- round trips ----------------------------------------------------------------------------


def count_statements(store: PostgresStore) -> list[str]:
    """Statements sent on the store's command connection from now on (it must be open)."""
    conn = store.commands.conn
    assert conn is not None
    sent: list[str] = []
    execute = conn.execute

    async def counting(query: Any, params: Any = None, **kwargs: Any) -> Any:
        sent.append(query.as_string(conn) if hasattr(query, "as_string") else str(query))
        return await execute(query, params, **kwargs)

    conn.execute = counting  # type: ignore[method-assign]
    return sent


async def test_uncontended_grant_and_release_are_one_statement_each(
    postgres: PostgresServer,
) -> None:
    url, _ = fresh_url(postgres)
    store = PostgresStore.from_url(url)
    try:
        session = await store.open_session(30, tenure.Holder("test", 1))
        sent = count_statements(store)
        for _ in range(3):
            granted = await store.attempt(session, "rt", None, enqueue=True)
            assert isinstance(granted, tenure.stores._spi.Grant) and granted.renewed_session
            assert len(sent) == 1 and ".attempt(" in sent[0], sent
            await store.release(session, "rt", granted.token)
            assert len(sent) == 2 and ".release(" in sent[1], sent
            sent.clear()
        assert await store.keep_alive(session)
        assert len(sent) == 1, sent
    finally:
        await store.aclose()


async def test_a_handed_over_waiter_learns_its_grant_with_one_read(
    postgres: PostgresServer,
) -> None:
    """The release's NOTIFY names the waiter's place and token: the waiter checks with one
    read (no lock, no write) that the lock is its own and its session alive."""
    url, _ = fresh_url(postgres)
    store_a, store_b = PostgresStore.from_url(url), PostgresStore.from_url(url)
    owner = tenure.Holder("test", 1)
    try:
        a = await store_a.open_session(30, owner)
        b = await store_b.open_session(30, owner)
        granted = await store_a.attempt(a, "h", None, enqueue=True)
        assert isinstance(granted, tenure.stores._spi.Grant)
        busy = await store_b.attempt(b, "h", None, enqueue=True)
        assert isinstance(busy, tenure.stores._spi.Busy) and busy.ticket is not None
        assert busy.holder is not None and busy.holder.token == granted.token
        sent = count_statements(store_b)
        await store_a.release(a, "h", granted.token)
        with anyio.fail_after(5):
            await store_b.wait(busy.ticket, busy, 5)
        handed = await store_b.attempt(b, "h", busy.ticket, enqueue=True)
        assert isinstance(handed, tenure.stores._spi.Grant)
        assert handed.token == granted.token + 1 and not handed.renewed_session
        assert len(sent) == 1 and "FROM" in sent[0] and ".attempt(" not in sent[0], sent
        assert [info.token for info in await store_a.locks("h")] == [handed.token]
        await store_b.release(b, "h", handed.token)
        assert await store_a.locks("h") == []
    finally:
        await store_a.aclose()
        await store_b.aclose()


def lose_answers(store: PostgresStore, error: Exception) -> None:
    """From now on, statements on the command connection commit but their answers are lost."""
    conn = store.commands.conn
    assert conn is not None
    execute = conn.execute

    async def lose_answer(query: Any, params: Any = None, **kwargs: Any) -> Any:
        await execute(query, params, **kwargs)  # committed (autocommit)...
        raise error  # ...but never heard of

    conn.execute = lose_answer  # type: ignore[method-assign]


async def test_a_grant_whose_answer_was_lost_is_asked_again_with_the_same_answer(
    postgres: PostgresServer,
) -> None:
    """A connection that dies under the grant: sent again on a fresh one, the same request
    gets the same grant (not a second token, nor a place behind itself)."""
    url, _ = fresh_url(postgres)
    store = PostgresStore.from_url(url)
    try:
        session = await store.open_session(30, tenure.Holder("test", 1))
        lose_answers(store, psycopg.OperationalError("server closed the connection"))
        granted = await store.attempt(session, "again", None, enqueue=True)
        assert isinstance(granted, tenure.stores._spi.Grant) and granted.token == 1
        [info] = await store.locks("again")
        assert info.token == 1 and info.waiters == 0
    finally:
        await store.aclose()


async def test_a_grant_whose_answer_was_lost_is_released_by_its_request(
    postgres: PostgresServer,
) -> None:
    """The grant committed but its answer never came: the store releases that grant (by the
    request id it sent) at its next call, and nothing else the session holds."""
    url, _ = fresh_url(postgres)
    store = PostgresStore.from_url(url)
    try:
        session = await store.open_session(30, tenure.Holder("test", 1))
        kept = await store.attempt(session, "kept", None, enqueue=False)
        assert isinstance(kept, tenure.stores._spi.Grant)
        lose_answers(store, psycopg.InterfaceError("the answer got lost"))
        with pytest.raises(StoreUnavailable):
            await store.attempt(session, "doubt", None, enqueue=False)
        assert store.commands.conn is None  # dropped: the next call reconnects, and cleans up first
        assert [info.name for info in await store.locks()] == ["kept"]
    finally:
        await store.aclose()


# -- waking -------------------------------------------------------------------------------


async def test_a_release_wakes_exactly_one_waiter(postgres: PostgresServer) -> None:
    url, _ = fresh_url(postgres)
    got: list[int] = []
    done = anyio.Event()
    async with AsyncExitStack() as stack:
        holder = await stack.enter_async_context(tenure.connect_async(url))
        waiters = [await stack.enter_async_context(tenure.connect_async(url)) for _ in range(4)]
        lease = await holder.lock("one", ttl=30).acquire()
        async with anyio.create_task_group() as tg:
            for index, client in enumerate(waiters):

                async def wait_turn(index: int = index, client: AsyncClient = client) -> None:
                    async with client.lock("one", ttl=30):
                        got.append(index)
                        await done.wait()

                tg.start_soon(wait_turn)
                await wait_until_waiters(holder, "one", index + 1)
            assert sum(store_of(c).notifications for c in waiters) == 0
            released = anyio.current_time()
            await lease.release()
            with anyio.fail_after(1):
                while not got:
                    await anyio.sleep(0.005)
            assert anyio.current_time() - released < 0.5
            await anyio.sleep(0.3)  # time for any extra notification to arrive
            assert got == [0]
            assert [store_of(c).notifications for c in waiters] == [1, 0, 0, 0]
            [info] = await holder.locks("one")
            assert info.waiters == 3
            done.set()
    assert got == [0, 1, 2, 3]


async def test_dead_waiter_is_skipped_promptly(postgres: PostgresServer) -> None:
    """A waiter killed while queued does not hold up the one behind it, although its session
    would live 30 s: nobody listens on its channel any more."""
    url, _ = fresh_url(postgres)
    script = textwrap.dedent(
        f"""
        import tenure
        c = tenure.connect({url!r})
        c.lock("q", ttl=30).acquire()
        """
    )
    async with tenure.connect_async(url) as a, tenure.connect_async(url) as c:
        lease = await a.lock("q", ttl=30).acquire()
        dead = subprocess.Popen([sys.executable, "-c", script])
        try:
            await wait_until_waiters(a, "q", 1)
        finally:
            dead.kill()
            dead.wait()
        got: list[float] = []

        async def live_waiter() -> None:
            async with c.lock("q", ttl=30):
                got.append(anyio.current_time())

        async with anyio.create_task_group() as tg:
            tg.start_soon(live_waiter)
            await wait_until_waiters(a, "q", 2)
            released = anyio.current_time()
            await lease.release()
        assert got[0] - released < 1.0


# -- a server that goes away ----------------------------------------------------------------


async def test_killed_server_loses_the_lease_within_its_ttl(own_server: PostgresServer) -> None:
    own_server.start()
    url, _ = fresh_url(own_server)
    reached_end = False
    try:
        async with tenure.connect_async(url) as client:
            with pytest.raises(LeaseLost):
                async with client.lock("doomed", ttl=1.5) as lease:
                    own_server.kill()
                    killed = anyio.current_time()
                    await anyio.sleep(10)  # cancelled at the deadline
                    reached_end = True
            stopped = anyio.current_time() - killed
            assert not reached_end and lease.lost
            assert stopped < 1.5, stopped
    finally:
        own_server.start()


async def test_reconnects_after_the_server_comes_back(own_server: PostgresServer) -> None:
    own_server.start()
    url, _ = fresh_url(own_server)
    async with tenure.connect_async(url) as a, tenure.connect_async(url) as b:
        first = await a.lock("back", ttl=30).acquire()
        own_server.stop()
        with pytest.raises(StoreUnavailable) as raised:
            await b.locks()
        assert "\n" not in str(raised.value)
        own_server.start()
        # The holder's session lived on by the server's clock; both clients reconnect.
        [info] = await b.locks("back")
        assert info.token == first.token
        first.check()
        got: list[float] = []

        async def waiter() -> None:
            async with b.lock("back", ttl=30) as lease:
                assert lease.token > first.token
                got.append(anyio.current_time())

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await wait_until_waiters(a, "back", 1)
            released = anyio.current_time()
            await first.release()
        assert got and got[0] - released < 0.5  # woken by NOTIFY on a new listener


# -- leader election ------------------------------------------------------------------------


async def test_changes_are_announced_only_while_watched(postgres: PostgresServer) -> None:
    """NOTIFY serialises the commits of all notifying transactions: unwatched, a lock's changes
    send none."""
    url, schema = fresh_url(postgres)
    store = PostgresStore.from_url(url)
    try:
        session = await store.open_session(30, tenure.Holder("test", 1))
        watch = await store.watch("quiet")
        assert isinstance(watch, PostgresWatch)
        await watch.aclose()
        await watch.aclose()  # idempotent
        async with await psycopg.AsyncConnection.connect(postgres.dsn, autocommit=True) as db:
            await db.execute(
                psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(watch.channel))
            )
            query = psycopg.sql.SQL("SELECT count(*) FROM {}.watchers").format(
                psycopg.sql.Identifier(schema)
            )
            assert await (await db.execute(query)).fetchone() == (0,)
            outcome = await store.attempt(session, "quiet", None, enqueue=False)
            assert isinstance(outcome, tenure.stores._spi.Grant)
            await store.release(session, "quiet", outcome.token)
            assert [n async for n in db.notifies(timeout=0.3)] == []
    finally:
        await store.aclose()


async def test_a_watch_whose_listener_died_reports_the_state_then(
    postgres: PostgresServer,
) -> None:
    """Changes made while the listening connection was gone are not lost silently: the next
    call listens again and reports the state as one change; later changes come one by one."""
    url, _ = fresh_url(postgres)
    store, other = PostgresStore.from_url(url), PostgresStore.from_url(url)
    try:
        session = await other.open_session(30, tenure.Holder("test", 1))
        watch = await store.watch("died")
        first = await other.attempt(session, "died", None, enqueue=False)
        assert isinstance(first, tenure.stores._spi.Grant)
        with anyio.fail_after(5):
            [change] = await watch.next(5)
        assert change.holder is not None and change.holder.token == first.token
        with psycopg.connect(postgres.dsn, autocommit=True) as db:
            db.execute("SELECT pg_terminate_backend(%s, 5000)", (store.listener.pid,))  # gone
        assert await other.proclaim(session, "died", first.token, "unseen")
        assert await other.proclaim(session, "died", first.token, "missed meanwhile")
        with anyio.fail_after(5):
            changes = await watch.next(5)
        assert [(c.holder.token, c.holder.value) for c in changes if c.holder] == [
            (first.token, "missed meanwhile")
        ]
        await other.release(session, "died", first.token)
        with anyio.fail_after(5):
            assert [c.holder for c in await watch.next(5)] == [None]
        await watch.aclose()
    finally:
        await store.aclose()
        await other.aclose()


# -- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "schema=bad-name",
        "schema=1st",
        "schema=a%22b",
        "schema=" + "x" * 64,
        "schema=a&schema=b",
        "no_such_option=1",
    ],
)
def test_bad_url_is_one_line_invalid_argument(query: str) -> None:
    url = f"postgresql://u:s3cret@127.0.0.1:1/db?{query}"
    with pytest.raises(InvalidArgument) as raised:
        tenure.connect(url)
    message = str(raised.value)
    assert "\n" not in message and "s3cret" not in message
    assert isinstance(raised.value, ValueError)


def test_url_goes_to_psycopg_without_tenures_parameters(postgres: PostgresServer) -> None:
    url, schema = fresh_url(postgres)
    store = PostgresStore.from_url(url + "&application_name=tenure-test")
    assert store.schema == schema
    assert (
        "schema=" not in store.transport.dsn
        and "application_name=tenure-test" in store.transport.dsn
    )
    assert PostgresStore.from_url(postgres.dsn).schema == "tenure"


async def test_a_lock_handed_over_as_the_store_went_away_is_passed_on_later(
    own_server: PostgresServer,
) -> None:
    """A waiter is handed the lock, then cannot leave because the server is down: its store
    leaves again at the next call, so the lock is not kept by a waiter that gave up."""
    own_server.start()
    url, _ = fresh_url(own_server)
    store = PostgresStore.from_url(url)
    owner = tenure.Holder("test", 1)
    try:
        a, b = [await store.open_session(30, owner) for _ in range(2)]
        granted = await store.attempt(a, "gone", None, enqueue=True)
        busy = await store.attempt(b, "gone", None, enqueue=True)
        assert isinstance(granted, tenure.stores._spi.Grant)
        assert isinstance(busy, tenure.stores._spi.Busy) and busy.ticket is not None
        await store.release(a, "gone", granted.token)  # handed to b...
        own_server.stop()
        with pytest.raises(StoreUnavailable):
            await store.leave(busy.ticket)  # ...which gives up while the server is down
        own_server.start()
        # b's session lives on (30 s, by the server's clock); the lock must not stay with it.
        assert await store.locks("gone") == []
    finally:
        own_server.start()
        await store.aclose()
