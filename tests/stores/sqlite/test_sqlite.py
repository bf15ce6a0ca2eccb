"""What only the embedded SQLite store must show: durable counters, boot and clock handling,
busy handling across processes, file placement and errors."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest

import tenure
from tenure import StoreUnavailable
from tenure._clock import REAL_CLOCK
from tenure.stores._spi import Grant, Holder, Session
from tenure.stores.sqlite import SQLiteStore
from tenure.stores.sqlite import events as sqlite_events
from tenure.stores.sqlite import schema as sqlite_schema

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def url(path: Path) -> str:
    return f"sqlite:///{path}"


async def test_token_counter_survives_deleted_rows(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    async with tenure.connect_async(url(db)) as client, client.lock("n", ttl=5) as first:
        pass
    raw = sqlite3.connect(db)
    raw.execute("DELETE FROM tenure_locks")
    raw.execute("DELETE FROM tenure_sessions")
    raw.commit()
    raw.close()
    async with tenure.connect_async(url(db)) as client, client.lock("n", ttl=5) as second:
        assert second.token > first.token


async def test_lease_from_an_earlier_boot_is_expired(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    async with tenure.connect_async(url(db)) as a:
        held = await a.lock("boot", ttl=60).acquire()
        # Rewrite history: this session was written in another boot of the machine.
        raw = sqlite3.connect(db)
        raw.execute("UPDATE tenure_sessions SET boot = 'an-earlier-boot'")
        raw.commit()
        raw.close()
        async with tenure.connect_async(url(db)) as b:
            lease = await b.lock("boot", ttl=5).acquire(wait=False)
            assert lease.token > held.token
            await lease.release()


async def test_wall_clock_jumps_do_not_matter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with tenure.connect_async(url(tmp_path / "s.db")) as a:
        lease = await a.lock("clock", ttl=1).acquire()
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + 7200)  # the wall clock jumps 2 h
        await anyio.sleep(1.5)  # over a TTL: renewals must have kept it
        lease.check()
        async with tenure.connect_async(url(tmp_path / "s.db")) as b:
            with pytest.raises(tenure.NotAcquired):
                await b.lock("clock", ttl=1).acquire(wait=False)
        monkeypatch.setattr(time, "time", lambda: real() - 7200)  # and back, past the start
        await anyio.sleep(0.5)
        lease.check()
        await lease.release()


async def test_dead_waiter_is_skipped_promptly(tmp_path: Path) -> None:
    """A waiter killed while queued does not hold up the one behind it."""
    db = tmp_path / "s.db"
    script = textwrap.dedent(
        f"""
        import tenure
        c = tenure.connect({url(db)!r})
        c.lock("q", ttl=30).acquire()
        """
    )
    async with tenure.connect_async(url(db)) as a, tenure.connect_async(url(db)) as c:
        lease = await a.lock("q", ttl=30).acquire()
        dead = subprocess.Popen([sys.executable, "-c", script])
        with anyio.fail_after(10):
            while not (await a.locks("q"))[0].waiters:
                await anyio.sleep(0.02)
        dead.kill()
        dead.wait()
        got: list[float] = []

        async def live_waiter() -> None:
            async with c.lock("q", ttl=30):
                got.append(anyio.current_time())

        async with anyio.create_task_group() as tg:
            tg.start_soon(live_waiter)
            with anyio.fail_after(5):
                while (await a.locks("q"))[0].waiters < 2:
                    await anyio.sleep(0.02)
            released = anyio.current_time()
            await lease.release()
        # The dead waiter's session would live 30 s: it is skipped because nobody listens on its
        # FIFO, not because its session expired.
        assert got[0] - released < 1.0
    assert not list((tmp_path / "s.db-wake").iterdir()), "wake-up FIFOs left behind"


async def test_dead_waiter_is_skipped_when_the_lock_expires(tmp_path: Path) -> None:
    """Nobody releases a lock whose holder died: the live waiter behind a dead one takes it
    when the holder's lease expires, not when the dead waiter's (long) session does."""
    db = tmp_path / "s.db"

    def start(ttl: float) -> subprocess.Popen[bytes]:
        # No lock-delay: this test is about the expiry, not the delay after it.
        script = (
            f"import tenure, time; c = tenure.connect({url(db)!r}, lock_delay=0);"
            f" c.lock('q', ttl={ttl}).acquire()"
        )
        return subprocess.Popen([sys.executable, "-c", script + "; time.sleep(60)"])

    async with tenure.connect_async(url(db)) as c:
        holder = start(ttl=1)
        with anyio.fail_after(10):
            while not await c.locks("q"):
                await anyio.sleep(0.02)
        dead = start(ttl=30)
        with anyio.fail_after(10):
            while not (await c.locks("q"))[0].waiters:
                await anyio.sleep(0.02)
        dead.kill()
        dead.wait()
        got: list[float] = []

        async def live_waiter() -> None:
            async with c.lock("q", ttl=30):
                got.append(anyio.current_time())

        async with anyio.create_task_group() as tg:
            tg.start_soon(live_waiter)
            with anyio.fail_after(5):
                while (await c.locks("q"))[0].waiters < 2:
                    await anyio.sleep(0.02)
            holder.kill()
            killed = anyio.current_time()
            holder.wait()
        assert got[0] - killed < 2.5  # the holder's 1 s lease, then one attempt


def test_many_processes_never_see_database_is_locked(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    script = textwrap.dedent(
        f"""
        import tenure
        with tenure.connect({url(db)!r}) as c:
            for i in range(40):
                name = "n" + str(i % 3)
                with c.lock(name, ttl=5) as lease:
                    print(name, lease.token)
        """
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(6)
    ]
    tokens: dict[str, list[int]] = {}
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
        assert b"locked" not in err
        for line in out.decode().splitlines():
            name, token = line.split()
            tokens.setdefault(name, []).append(int(token))
    assert sum(len(each) for each in tokens.values()) == 240
    for each in tokens.values():  # every grant of a name got its own token: 1, 2, … n
        assert sorted(each) == list(range(1, len(each) + 1))


def test_default_file_under_state_dir_owner_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("TENURE_STORE", raising=False)
    with tenure.connect() as client, client.lock("d", ttl=5):
        pass
    db = tmp_path / "state" / "tenure" / "locks.db"
    assert db.exists()
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700


def test_tenure_store_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENURE_STORE", url(tmp_path / "env.db"))
    with tenure.connect() as client:
        assert client.url == url(tmp_path / "env.db")
    assert (tmp_path / "env.db").exists()


def test_bad_files_give_one_clear_error(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreUnavailable, match="not a tenure database"):
        tenure.connect(url(corrupt))
    assert corrupt.read_bytes() == b"this is not a database" * 100  # untouched
    with pytest.raises(StoreUnavailable, match="directory"):
        tenure.connect(url(tmp_path))
    with pytest.raises(StoreUnavailable, match="no such directory"):
        tenure.connect(url(tmp_path / "missing" / "s.db"))
    with pytest.raises(tenure.InvalidArgument, match="SQLite store URL"):
        tenure.connect("sqlite://host/x.db")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as another user")
def test_unreadable_and_read_only_files_are_reported() -> None:
    """Root can read anything, so the store is opened as `nobody`."""
    import shutil
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="tenure-perm-"))
    try:
        os.chmod(top, 0o755)
        readable = top / "ro.db"
        with tenure.connect(url(readable)):
            pass
        os.chmod(readable, 0o644)
        hidden = top / "hidden"
        hidden.mkdir(mode=0o700)
        src = str(Path(tenure.__file__).parents[1])
        for target, expected in ((readable, "read-only"), (hidden / "s.db", "ermission denied")):
            script = f"import tenure; tenure.connect({url(target)!r})"
            proc = subprocess.run(
                [*AS_NOBODY, sys.executable, "-c", script],
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONPATH": src},
            )
            last = proc.stderr.strip().splitlines()[-1]
            assert last.startswith("tenure._errors.StoreUnavailable"), proc.stderr
            assert expected in last
    finally:
        shutil.rmtree(top)


# -- leader election: values, events and watches ------------------------------------------

SCHEMA_1 = """
CREATE TABLE tenure_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE tenure_sessions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    boot TEXT NOT NULL, expires REAL NOT NULL, ttl REAL NOT NULL,
    host TEXT NOT NULL, pid INTEGER NOT NULL, label TEXT NOT NULL);
CREATE TABLE tenure_tokens (name TEXT PRIMARY KEY, last INTEGER NOT NULL);
CREATE TABLE tenure_locks (
    name TEXT PRIMARY KEY, token INTEGER NOT NULL, session INTEGER NOT NULL, waiter INTEGER);
CREATE TABLE tenure_waiters (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL, session INTEGER NOT NULL, wake TEXT NOT NULL);
INSERT INTO tenure_meta (key, value) VALUES ('schema', '1');
INSERT INTO tenure_tokens (name, last) VALUES ('old', 7);
"""


def event_count(db: Path, name: str | None = None) -> int:
    raw = sqlite3.connect(db)
    try:
        query = "SELECT count(*) FROM tenure_events WHERE ? IS NULL OR name = ?"
        return int(raw.execute(query, (name, name)).fetchone()[0])
    finally:
        raw.close()


async def test_a_schema_1_file_gets_the_value_and_lock_delay_columns(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    raw = sqlite3.connect(db)
    raw.executescript(SCHEMA_1)
    raw.close()
    first, second = SQLiteStore.from_url(url(db)), SQLiteStore.from_url(url(db))  # idempotent
    try:
        session = await first.open_session(10, Holder("h", 1))
        grant = await first.attempt(session, "old", None, False)
        assert isinstance(grant, Grant) and grant.token == 8  # the old counter carries on
        assert await second.proclaim(session, "old", grant.token, "v")
        [info] = await second.locks("old")
        assert info.value == "v"
        await first.close_session(session)
    finally:
        await first.aclose()
        await second.aclose()
    raw = sqlite3.connect(db)
    assert raw.execute("SELECT value FROM tenure_meta WHERE key = 'schema'").fetchone() == ("3",)
    raw.close()


async def test_a_schema_2_file_with_a_live_lock_gets_lock_delay(tmp_path: Path) -> None:
    """A lock taken by an older tenure survives the upgrade, and has no lock-delay (it never
    asked for one); new sessions get theirs."""
    db = tmp_path / "s.db"
    raw = sqlite3.connect(db)
    raw.executescript(
        SCHEMA_1.replace("waiter INTEGER)", "waiter INTEGER, value TEXT)").replace("'1'", "'2'")
    )
    now = REAL_CLOCK.now()
    raw.execute(
        "INSERT INTO tenure_sessions (boot, expires, ttl, host, pid, label)"
        " VALUES (?, ?, 1, 'h', 1, '')",
        (sqlite_schema.boot_id(), now + 0.5),
    )
    raw.execute("INSERT INTO tenure_locks (name, token, session) VALUES ('old', 7, 1)")
    raw.commit()
    raw.close()
    store = SQLiteStore.from_url(url(db))
    try:
        [info] = await store.locks("old")
        assert info.token == 7
        await anyio.sleep(0.6)
        assert await store.lock_delays() == []  # expired, with no delay of its own
        session = await store.open_session(10, Holder("h", 2), lock_delay=5)
        grant = await store.attempt(session, "old", None, False)
        assert isinstance(grant, Grant) and grant.token == 8
        await store.close_session(session)
    finally:
        await store.aclose()
    raw = sqlite3.connect(db)
    assert raw.execute("SELECT value FROM tenure_meta WHERE key = 'schema'").fetchone() == ("3",)
    raw.close()


# -- lock-delay ------------------------------------------------------------------------------


async def _expired_holder(store: SQLiteStore, name: str, delay: float) -> tuple[Session, int]:
    """A session holding ``name`` that expires at once (never kept alive), and its token."""
    dead = await store.open_session(0.2, Holder("h", 1), lock_delay=delay)
    grant = await store.attempt(dead, name, None, False)
    assert isinstance(grant, Grant)
    await anyio.sleep(0.3)
    return dead, grant.token


async def test_the_sweep_keeps_the_hold_back_and_a_late_release_frees_nothing(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    store = SQLiteStore.from_url(url(db))
    try:
        dead, token = await _expired_holder(store, "n", 3)
        await store.release(dead, "n", token)  # too late: the session ended without a release
        live = await store.open_session(10, Holder("h", 2))  # sweeps the expired session
        raw = sqlite3.connect(db)
        assert raw.execute("SELECT count(*) FROM tenure_sessions").fetchone() == (1,)
        assert raw.execute("SELECT name, token FROM tenure_held").fetchall() == [("n", token)]
        raw.close()
        await store.close_session(dead)  # a late close frees nothing either
        [held] = await store.lock_delays()
        assert (held.name, held.token) == ("n", token) and 2 < held.free_in <= 3
        assert not isinstance(await store.attempt(live, "n", None, False), Grant)
        await store.close_session(live)
    finally:
        await store.aclose()


async def test_a_hold_back_from_an_earlier_boot_is_over(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = SQLiteStore.from_url(url(db))
    try:
        await _expired_holder(store, "swept", 60)
        await _expired_holder(store, "unswept", 60)  # its open_session swept the first one
        assert [held.name for held in await store.lock_delays()] == ["swept", "unswept"]
        raw = sqlite3.connect(db)
        raw.execute("UPDATE tenure_sessions SET boot = 'an-earlier-boot'")
        raw.execute("UPDATE tenure_held SET boot = 'an-earlier-boot'")
        raw.commit()
        raw.close()
        assert await store.lock_delays() == []
        live = await store.open_session(10, Holder("h", 3))
        for name in ("swept", "unswept"):
            assert isinstance(await store.attempt(live, name, None, False), Grant)
        await store.close_session(live)
    finally:
        await store.aclose()


async def test_events_stay_bounded_and_a_watch_left_behind_gets_the_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_events, "EVENTS_KEPT", 5)
    db = tmp_path / "s.db"
    store = SQLiteStore.from_url(url(db))
    session = await store.open_session(10, Holder("h", 1))
    behind = await store.watch("b")
    try:
        grant = await store.attempt(session, "b", None, False)
        assert isinstance(grant, Grant)
        for i in range(20):
            assert await store.proclaim(session, "b", grant.token, f"v{i}")
        assert event_count(db, "b") == 5
        # 21 changes, 16 of them pruned unread: one change with the state now, not a gap.
        [change] = await behind.next(1)
        assert change.holder is not None
        assert (change.holder.token, change.holder.value) == (grant.token, "v19")
        assert await behind.next(0.1) == []
        await store.release(session, "b", grant.token)
        [freed] = await behind.next(1)
        assert freed.holder is None
    finally:
        await behind.aclose()
        await store.close_session(session)
    assert event_count(db) == 0  # the last watch of a name takes its events along
    assert not list((tmp_path / "s.db-wake").iterdir()), "FIFOs left behind"
    await store.aclose()


async def test_unwatched_names_write_no_events(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    async with tenure.connect_async(url(db)) as client, client.lock("plain", ttl=5):
        pass
    assert event_count(db) == 0


async def test_a_watcher_in_another_process_sees_every_change(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    script = textwrap.dedent(
        f"""
        import anyio
        from tenure.stores.sqlite import SQLiteStore

        async def main():
            store = SQLiteStore.from_url({url(db)!r})
            watch = await store.watch("far")
            print("ready", flush=True)
            seen = []
            with anyio.fail_after(20):
                while len(seen) < 4:
                    seen += await watch.next(5)
            for change in seen:
                print(None if change.holder is None else (change.holder.token, change.holder.value))
            await watch.aclose()
            await store.aclose()

        anyio.run(main)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        store = SQLiteStore.from_url(url(db))
        session = await store.open_session(10, Holder("h", 1))
        grant = await store.attempt(session, "far", None, False)
        assert isinstance(grant, Grant)
        assert await store.proclaim(session, "far", grant.token, "here")
        await store.close_session(session)
        again = await store.open_session(10, Holder("h", 1))
        second = await store.attempt(again, "far", None, False)
        assert isinstance(second, Grant)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0
        assert out.splitlines() == [
            f"({grant.token}, None)",
            f"({grant.token}, 'here')",
            "None",
            f"({second.token}, None)",
        ]
        await store.close_session(again)
        await store.aclose()
    finally:
        proc.kill()
        proc.wait()


async def test_a_killed_watcher_is_dropped(tmp_path: Path) -> None:
    """A watch whose process died is found by its FIFO without a reader, like a dead waiter."""
    db = tmp_path / "s.db"
    script = textwrap.dedent(
        f"""
        import anyio, time
        from tenure.stores.sqlite import SQLiteStore

        async def main():
            store = SQLiteStore.from_url({url(db)!r})
            await store.watch("k")
            print("ready", flush=True)
            time.sleep(60)

        anyio.run(main)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    proc.kill()
    proc.wait()
    store = SQLiteStore.from_url(url(db))
    try:
        session = await store.open_session(10, Holder("h", 1))
        grant = await store.attempt(session, "k", None, False)
        assert isinstance(grant, Grant)
        await store.release(session, "k", grant.token)
        await store.close_session(session)
    finally:
        await store.aclose()
    assert event_count(db) == 0  # nobody watches any more: nothing recorded
    raw = sqlite3.connect(db)
    assert raw.execute("SELECT count(*) FROM tenure_observers").fetchone() == (0,)
    raw.close()
    assert not list((tmp_path / "s.db-wake").iterdir())


async def test_a_hand_over_between_the_check_and_the_attempt_is_a_grant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A release that hands the lock to a waiter after the waiter's unlocked look and before
    its transaction: the transaction sees the grant (it used to queue the waiter again behind
    its own lock, and nothing moved until its session ended)."""
    store = SQLiteStore(tmp_path / "s.db")
    a = await store.open_session(5.0, Holder("h", 1, "A"))
    b = await store.open_session(5.0, Holder("h", 2, "B"))
    first = await store.attempt(a, "L", None, True)
    busy = await store.attempt(b, "L", None, True)
    assert isinstance(first, Grant) and not isinstance(busy, Grant)
    await store.release(a, "L", first.token)  # hands "L" over to b's ticket
    monkeypatch.setattr(store, "_handed_to", lambda session, ticket: None)  # looked before
    outcome = await store.attempt(b, "L", busy.ticket, True)
    assert isinstance(outcome, Grant) and outcome.token > first.token
    [info] = await store.locks("L")
    assert (info.holder.label, info.waiters) == ("B", 0)
    await store.aclose()


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("sqlite:////", "the path '/' names a directory"),
        ("sqlite:///dir/", "the path 'dir/' names a directory"),
        ("sqlite:///.", "the path '.' names a directory"),
        ("sqlite:///a%00b", "NUL byte"),
    ],
)
def test_a_url_that_names_no_file_is_one_line_invalid_argument(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, why: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(tenure.InvalidArgument, match=why) as raised:
        tenure.connect(url)
    assert "\n" not in str(raised.value)
    assert list(tmp_path.iterdir()) == []  # nothing made
