"""tenure.fence against real SQLite files and a real PostgreSQL server."""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import random
import sqlite3
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tenure._errors import InvalidArgument, StaleToken, TenureError
from tenure.fence import SQLFence
from tenure.stores.postgres.server import PostgresServer

# -- one view of both databases -------------------------------------------------------------


@dataclass
class DB:
    """A fresh fence table and data table on one database; ``p`` is its placeholder."""

    name: str
    connect: Callable[[], Any]
    fence: SQLFence
    data: str
    p: str
    path: Path | None = None  # SQLite only

    def setup(self) -> None:
        conn = self.connect()
        try:
            self.fence.ensure_table(conn)
            conn.cursor().execute(f"CREATE TABLE {self.data} (k TEXT PRIMARY KEY, v TEXT)")
            conn.commit()
        finally:
            conn.close()

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        conn = self.connect()  # a separate connection: sees only what was committed
        try:
            cur = conn.cursor()
            cur.execute(sql.replace("?", self.p), params)
            return [tuple(r) for r in cur.fetchall()]
        finally:
            conn.close()

    def run(self, sql: str) -> None:
        conn = self.connect()
        try:
            conn.cursor().execute(sql)
            conn.commit()
        finally:
            conn.close()

    def highest(self, resource: str) -> int | None:
        rows = self.query(f"SELECT token FROM {self.fence.table} WHERE resource = ?", (resource,))
        return rows[0][0] if rows else None

    def value(self, k: str = "x") -> str | None:
        rows = self.query(f"SELECT v FROM {self.data} WHERE k = ?", (k,))
        return rows[0][0] if rows else None

    def write(self, conn: Any, resource: str, token: int, v: str, k: str = "x") -> None:
        """The protected write, fenced: upsert data[k] = v."""
        with self.fence.fenced(conn, resource, token) as cur:
            cur.execute(
                f"INSERT INTO {self.data} (k, v) VALUES ({self.p}, {self.p}) "
                "ON CONFLICT (k) DO UPDATE SET v = excluded.v",
                (k, v),
            )


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def sqlite_db(tmp_path: Path) -> DB:
    path = tmp_path / "resource.db"
    db = DB(
        "sqlite",
        lambda: sqlite3.connect(path, timeout=30),
        SQLFence(),
        "data",
        "?",
        path,
    )
    db.setup()
    return db


@pytest.fixture
def pg_db(postgres: PostgresServer) -> Iterator[DB]:
    db = DB(
        "postgres",
        lambda: psycopg.connect(postgres.dsn),
        SQLFence(_unique("fence")),
        _unique("data"),
        "%s",
    )
    db.setup()
    yield db
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {db.fence.table}, {db.data}")


@pytest.fixture(params=["sqlite", "pg"])
def db(request: pytest.FixtureRequest) -> DB:
    return request.getfixturevalue(f"{request.param}_db")  # type: ignore[no-any-return]


# -- the rules -------------------------------------------------------------------------------


def test_first_token_for_new_resource_is_admitted_and_recorded(db: DB) -> None:
    conn = db.connect()
    db.write(conn, "orders", 7, "a")
    assert db.highest("orders") == 7
    assert db.value() == "a"  # committed: another connection sees it
    conn.close()


def test_equal_token_is_admitted(db: DB) -> None:
    conn = db.connect()
    db.write(conn, "orders", 7, "a")
    db.write(conn, "orders", 7, "b")
    assert db.highest("orders") == 7
    assert db.value() == "b"
    conn.close()


def test_higher_token_is_admitted_and_recorded(db: DB) -> None:
    conn = db.connect()
    db.write(conn, "orders", 7, "a")
    db.write(conn, "orders", 12, "b")
    assert db.highest("orders") == 12
    assert db.value() == "b"
    conn.close()


def test_lower_token_is_refused_and_the_write_is_not_applied(db: DB) -> None:
    conn = db.connect()
    db.write(conn, "orders", 12, "new")
    with pytest.raises(StaleToken) as caught:
        db.write(conn, "orders", 7, "stale")
    assert (caught.value.resource, caught.value.token, caught.value.highest) == ("orders", 7, 12)
    assert isinstance(caught.value, TenureError)
    assert db.value() == "new"
    assert db.highest("orders") == 12
    # The refused transaction was rolled back: the connection is usable at once.
    db.write(conn, "orders", 12, "again")
    assert db.value() == "again"
    conn.close()


def test_body_exception_rolls_back_the_write_and_the_token(db: DB) -> None:
    conn = db.connect()
    db.write(conn, "orders", 5, "a")
    with pytest.raises(RuntimeError, match="boom"), db.fence.fenced(conn, "orders", 9) as cur:
        cur.execute(f"UPDATE {db.data} SET v = {db.p} WHERE k = {db.p}", ("b", "x"))
        raise RuntimeError("boom")
    assert db.value() == "a"
    assert db.highest("orders") == 5  # 9 was never committed, so 6 still passes
    db.write(conn, "orders", 6, "c")
    assert db.value() == "c"
    conn.close()


def test_resources_are_independent(db: DB) -> None:
    conn = db.connect()
    db.write(conn, "a", 10, "a10", k="a")
    db.write(conn, "b", 1, "b1", k="b")
    with pytest.raises(StaleToken) as caught:
        db.write(conn, "a", 5, "a5", k="a")
    assert caught.value.highest == 10
    db.write(conn, "b", 5, "b5", k="b")
    assert (db.highest("a"), db.highest("b")) == (10, 5)
    assert (db.value("a"), db.value("b")) == ("a10", "b5")
    conn.close()


def test_fenced_refuses_a_connection_already_in_a_transaction(db: DB) -> None:
    conn = db.connect()
    conn.cursor().execute(f"INSERT INTO {db.data} (k, v) VALUES ('y', 'pending')")
    with (
        pytest.raises(InvalidArgument, match="commit or roll back"),
        db.fence.fenced(conn, "orders", 1),
    ):
        pass
    conn.rollback()
    assert db.highest("orders") is None
    assert db.value("y") is None
    conn.close()


def test_ensure_table_is_idempotent(db: DB) -> None:
    conn = db.connect()
    db.write(conn, "orders", 3, "a")
    db.fence.ensure_table(conn)
    assert db.highest("orders") == 3
    conn.close()


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "table", ["", "1fence", "fence;drop", "a.b.c", "a b", 'f"x', "fence-x", ".f", "f.", "x" * 64]
)
def test_bad_table_name_is_invalid_argument(table: str) -> None:
    with pytest.raises(InvalidArgument, match="table name"):
        SQLFence(table)


@pytest.mark.parametrize("token", [True, False, 1.0, "5", None, -1, 2**63])
def test_bad_token_is_invalid_argument(sqlite_db: DB, token: Any) -> None:
    conn = sqlite_db.connect()
    with pytest.raises(InvalidArgument, match="token"):
        sqlite_db.fence.fenced(conn, "orders", token)
    with pytest.raises(InvalidArgument, match="token"):
        sqlite_db.fence.admit(conn.cursor(), "orders", token)
    assert not conn.in_transaction
    conn.close()


@pytest.mark.parametrize("resource", ["", None, 5, b"orders", "a\x00b"])
def test_bad_resource_is_invalid_argument(sqlite_db: DB, resource: Any) -> None:
    conn = sqlite_db.connect()
    with pytest.raises(InvalidArgument, match="resource"):
        sqlite_db.fence.fenced(conn, resource, 1)
    with pytest.raises(ValueError, match="resource"):  # InvalidArgument is a ValueError
        sqlite_db.fence.admit(conn.cursor(), resource, 1)
    conn.close()


def test_largest_token_is_accepted(db: DB) -> None:
    conn = db.connect()
    db.write(conn, "orders", 2**63 - 1, "max")
    assert db.highest("orders") == 2**63 - 1
    conn.close()


def test_unsupported_connection_is_invalid_argument() -> None:
    with pytest.raises(InvalidArgument, match="sqlite3 and psycopg"):
        SQLFence().fenced(object(), "orders", 1)  # type: ignore[call-overload]


# -- SQLite specifics ------------------------------------------------------------------------

SQLITE_MODES: list[dict[str, Any]] = [{}, {"isolation_level": None}]
if sys.version_info >= (3, 12):
    SQLITE_MODES.append({"autocommit": True})


@pytest.mark.parametrize("mode", SQLITE_MODES, ids=repr)
def test_sqlite_transaction_modes(tmp_path: Path, mode: dict[str, Any]) -> None:
    path = tmp_path / "r.db"
    conn = sqlite3.connect(path, **mode)
    fence = SQLFence("main.fence")
    fence.ensure_table(conn)
    conn.execute("CREATE TABLE IF NOT EXISTS data (v TEXT)")
    with fence.fenced(conn, "r", 2) as cur:
        cur.execute("INSERT INTO data VALUES ('two')")
    with pytest.raises(StaleToken), fence.fenced(conn, "r", 1) as cur:
        cur.execute("INSERT INTO data VALUES ('one')")
    assert not conn.in_transaction
    other = sqlite3.connect(path)
    assert other.execute("SELECT v FROM data").fetchall() == [("two",)]
    assert other.execute("SELECT token FROM fence").fetchall() == [(2,)]
    other.close()
    conn.close()


if sys.version_info >= (3, 12):  # defined only where sqlite3 has autocommit (no skip noise)

    def test_sqlite_autocommit_false_is_refused_by_fenced(tmp_path: Path) -> None:
        conn = sqlite3.connect(tmp_path / "r.db", autocommit=False)
        with pytest.raises(InvalidArgument, match="autocommit"), SQLFence().fenced(conn, "r", 1):
            pass
        conn.close()


def test_sqlite_admit_inside_callers_transaction(sqlite_db: DB) -> None:
    conn = sqlite_db.connect()
    cur = conn.cursor()
    sqlite_db.fence.admit(cur, "orders", 4)  # legacy mode opens the transaction implicitly
    cur.execute("INSERT INTO data (k, v) VALUES ('x', 'four')")
    assert sqlite_db.highest("orders") is None  # not committed yet
    conn.commit()
    assert (sqlite_db.highest("orders"), sqlite_db.value()) == (4, "four")
    with pytest.raises(StaleToken):
        sqlite_db.fence.admit(cur, "orders", 3)
    conn.rollback()
    assert sqlite_db.highest("orders") == 4
    conn.close()


def test_sqlite_fenced_takes_the_write_lock_at_begin(sqlite_db: DB) -> None:
    first = sqlite_db.connect()
    assert sqlite_db.path is not None
    second = sqlite3.connect(sqlite_db.path, timeout=0.2)
    statements: list[str] = []
    second.set_trace_callback(statements.append)
    with sqlite_db.fence.fenced(first, "orders", 1):
        # BEGIN IMMEDIATE: a second fenced transaction waits at BEGIN, before it reads anything.
        with (
            pytest.raises(sqlite3.OperationalError, match="locked"),
            sqlite_db.fence.fenced(second, "orders", 2),
        ):
            pass
        assert statements == ["BEGIN IMMEDIATE"]
        assert not second.in_transaction
    sqlite_db.write(second, "orders", 2, "two")
    assert sqlite_db.highest("orders") == 2
    first.close()
    second.close()


# -- concurrency: the log of what the resource accepted must never go down ------------------

WORKERS = 4
TOKENS = 160  # tokens 1..TOKENS, dealt round-robin to the workers


def _hand(worker: int, seed: int) -> list[int]:
    """Mostly rising, like a holder's own writes, with some neighbours swapped (stale retries)."""
    hand = [t for t in range(1, TOKENS + 1) if t % WORKERS == worker]
    rng = random.Random(seed * 100 + worker)
    for i in range(len(hand) - 1):
        if rng.random() < 0.25:
            hand[i], hand[i + 1] = hand[i + 1], hand[i]
    return hand


def _check_log(log: list[tuple[int, int]], refused: list[tuple[int, int]]) -> None:
    """The safety check on ``(worker, token)`` rows in commit order: no token lower than an
    earlier one was ever accepted."""
    accepted = [token for _, token in log]
    drops = [(a, b) for a, b in itertools.pairwise(accepted) if b < a]
    assert not drops, f"a lower token was accepted after a higher one: {drops[:5]}"
    assert accepted[-1] == TOKENS  # the highest token ever offered always wins
    assert sorted(accepted + [t for t, _ in refused]) == list(range(1, TOKENS + 1))
    assert all(highest > token for token, highest in refused)
    assert refused, "the workload should include stale tokens"
    assert _interleavings(log) >= 3, "the workers never interleaved: nothing was raced"


def _interleavings(log: list[tuple[int, int]]) -> int:
    return sum(a[0] != b[0] for a, b in itertools.pairwise(log))


def _sqlite_worker(path: str, worker: int, seed: int, start: Any, results: Any) -> None:
    conn = sqlite3.connect(path, timeout=60)
    fence = SQLFence()
    refused = []
    pause = random.Random(worker).uniform
    start.wait()
    for token in _hand(worker, seed):
        try:
            with fence.fenced(conn, "shared", token) as cur:
                cur.execute("INSERT INTO log (worker, token) VALUES (?, ?)", (worker, token))
        except StaleToken as e:
            refused.append((token, e.highest))
        # SQLite's busy handler polls with growing sleeps (up to 100 ms), so a writer that loops
        # with short pauses keeps winning the lock; pauses well above a commit let others in.
        time.sleep(pause(0.004, 0.012))
    conn.close()
    results.put(refused)


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_sqlite_concurrent_processes_never_accept_a_lower_token(
    tmp_path: Path, journal: str
) -> None:
    path = str(tmp_path / "r.db")
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA journal_mode={journal}")
    conn.execute("CREATE TABLE log (id INTEGER PRIMARY KEY AUTOINCREMENT, worker INT, token INT)")
    SQLFence().ensure_table(conn)
    ctx = multiprocessing.get_context("spawn")  # fresh interpreters: no inherited SQLite state
    start, results = ctx.Barrier(WORKERS), ctx.Queue()
    procs = [
        ctx.Process(target=_sqlite_worker, args=(path, w, 1, start, results))
        for w in range(WORKERS)
    ]
    for proc in procs:
        proc.start()
    refused = [r for _ in procs for r in results.get(timeout=60)]
    for proc in procs:
        proc.join(10)
        assert proc.exitcode == 0
    log = conn.execute("SELECT worker, token FROM log ORDER BY id").fetchall()
    assert conn.execute("SELECT token FROM tenure_fence").fetchall() == [(TOKENS,)]
    conn.close()
    _check_log(log, refused)


def _pg_run(
    db: DB, resource: str, seed: int, fenced: bool = True
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """WORKERS threads, one connection each, log their hands' writes in commit order."""
    log = _unique("log")
    db.run(f"CREATE TABLE {log} (id BIGSERIAL PRIMARY KEY, worker INT, token BIGINT)")
    insert = f"INSERT INTO {log} (worker, token) VALUES (%s, %s)"
    refused: list[tuple[int, int]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(WORKERS)

    def work(worker: int) -> None:
        pause = random.Random(worker).uniform
        try:
            with db.connect() as conn:
                start.wait()
                for token in _hand(worker, seed):
                    try:
                        if fenced:
                            with db.fence.fenced(conn, resource, token) as cur:
                                cur.execute(insert, (worker, token))
                        else:
                            with conn.transaction():
                                conn.execute(insert, (worker, token))
                    except StaleToken as e:
                        refused.append((token, e.highest))
                    time.sleep(pause(0, 0.002))  # let the other threads in (GIL, lock waits)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    log_rows = db.query(f"SELECT worker, token FROM {log} ORDER BY id")
    db.run(f"DROP TABLE {log}")
    return log_rows, refused


def test_postgres_concurrent_threads_never_accept_a_lower_token(pg_db: DB) -> None:
    for seed in range(3):
        log, refused = _pg_run(pg_db, f"shared{seed}", seed)
        _check_log(log, refused)
        assert pg_db.highest(f"shared{seed}") == TOKENS


def test_postgres_same_run_without_the_fence_shows_the_violation(pg_db: DB) -> None:
    # The checker must bite: without fencing, stale writes land after newer ones.
    log, refused = _pg_run(pg_db, "shared", seed=0, fenced=False)
    with pytest.raises(AssertionError, match="lower token was accepted"):
        _check_log(log, refused)


# -- PostgreSQL: concurrent admits of one resource serialize on the fence row ----------------


def _wait_until_blocked(dsn: str, pid: int) -> None:
    """Wait until backend ``pid`` waits for a lock (not just sleeps on a slow machine)."""
    deadline = time.monotonic() + 10
    with psycopg.connect(dsn, autocommit=True) as watcher:
        while time.monotonic() < deadline:
            row = watcher.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone()
            if row and row[0] == "Lock":
                return
            time.sleep(0.01)
    raise AssertionError(f"backend {pid} never waited for a lock")


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as e:
            out.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def test_postgres_uncommitted_admit_blocks_a_lower_one_which_then_is_refused(
    pg_db: DB, postgres: PostgresServer
) -> None:
    setup = pg_db.connect()
    pg_db.write(setup, "r", 3, "three")
    a, b = pg_db.connect(), pg_db.connect()
    b_pid = b.info.backend_pid
    with pg_db.fence.fenced(a, "r", 10) as cur:
        cur.execute(f"UPDATE {pg_db.data} SET v = 'ten'")
        # b's fence row still says 3, but b must wait for a and then see 10.
        thread, out = _in_thread(lambda: pg_db.write(b, "r", 5, "five"))
        _wait_until_blocked(postgres.dsn, b_pid)
        assert thread.is_alive()
    thread.join(10)
    assert isinstance(out[0], StaleToken) and out[0].highest == 10, out
    assert (pg_db.value(), pg_db.highest("r")) == ("ten", 10)
    for c in (setup, a, b):
        c.close()


def test_postgres_refused_admit_still_locks_the_row_until_rollback(
    pg_db: DB, postgres: PostgresServer
) -> None:
    setup = pg_db.connect()
    pg_db.write(setup, "r", 10, "ten")
    a, b = pg_db.connect(), pg_db.connect()
    b_pid = b.info.backend_pid
    with a.transaction(), a.cursor() as cur:
        with pytest.raises(StaleToken):
            pg_db.fence.admit(cur, "r", 4)  # WHERE false: nothing updated, yet the row is locked
        thread, out = _in_thread(lambda: pg_db.write(b, "r", 20, "twenty"))
        _wait_until_blocked(postgres.dsn, b_pid)
        assert thread.is_alive()
        # leaving the block commits a's (empty) transaction and releases the row
    thread.join(10)
    assert out == [None]
    assert (pg_db.value(), pg_db.highest("r")) == ("twenty", 20)
    for c in (setup, a, b):
        c.close()


def test_postgres_rolled_back_admit_lets_the_waiter_through(
    pg_db: DB, postgres: PostgresServer
) -> None:
    setup = pg_db.connect()
    pg_db.write(setup, "r", 3, "three")
    a, b = pg_db.connect(), pg_db.connect()
    with pytest.raises(RuntimeError), pg_db.fence.fenced(a, "r", 10):
        thread, out = _in_thread(lambda: pg_db.write(b, "r", 5, "five"))
        _wait_until_blocked(postgres.dsn, b.info.backend_pid)
        raise RuntimeError("a gives up")
    thread.join(10)
    assert out == [None]  # 10 never committed, so 5 is the newest the resource has seen
    assert (pg_db.value(), pg_db.highest("r")) == ("five", 5)
    for c in (setup, a, b):
        c.close()


# -- PostgreSQL: connection modes, row factories, schemas ------------------------------------


@pytest.mark.parametrize("autocommit", [False, True])
def test_postgres_fenced_commits_in_both_autocommit_modes(
    pg_db: DB, postgres: PostgresServer, autocommit: bool
) -> None:
    with psycopg.connect(postgres.dsn, autocommit=autocommit) as conn:
        pg_db.write(conn, "r", 2, "two")
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert (pg_db.value(), pg_db.highest("r")) == ("two", 2)
        with pytest.raises(StaleToken):
            pg_db.write(conn, "r", 1, "one")
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert pg_db.value() == "two"


def test_postgres_dict_rows_report_the_highest_token(pg_db: DB, postgres: PostgresServer) -> None:
    with psycopg.connect(postgres.dsn, row_factory=dict_row) as conn:
        pg_db.write(conn, "r", 8, "eight")
        with pytest.raises(StaleToken) as caught:
            pg_db.write(conn, "r", 2, "two")
        assert caught.value.highest == 8


def test_postgres_schema_qualified_table(postgres: PostgresServer) -> None:
    schema = _unique("s")
    fence = SQLFence(f"{schema}.fence")
    with psycopg.connect(postgres.dsn) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        fence.ensure_table(conn)
        with fence.fenced(conn, "r", 5):
            pass
        with pytest.raises(StaleToken), fence.fenced(conn, "r", 4):
            pass
        assert conn.execute(f"SELECT token FROM {schema}.fence").fetchall() == [(5,)]
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
        conn.commit()


# -- PostgreSQL: async ------------------------------------------------------------------------


def test_async_fenced_admits_and_refuses(pg_db: DB, postgres: PostgresServer) -> None:
    async def main() -> None:
        conn = await psycopg.AsyncConnection.connect(postgres.dsn)
        async with pg_db.fence.fenced_async(conn, "r", 7) as cur:
            await cur.execute(f"INSERT INTO {pg_db.data} (k, v) VALUES ('x', 'seven')")
        async with pg_db.fence.fenced_async(conn, "r", 7) as cur:
            await cur.execute(f"UPDATE {pg_db.data} SET v = 'seven again'")
        with pytest.raises(StaleToken) as caught:
            async with pg_db.fence.fenced_async(conn, "r", 6) as cur:
                await cur.execute(f"UPDATE {pg_db.data} SET v = 'six'")
        assert caught.value.highest == 7
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        await conn.execute("SELECT 1")  # in a transaction now (autocommit off)
        with pytest.raises(InvalidArgument, match="commit or roll back"):
            async with pg_db.fence.fenced_async(conn, "r", 9):
                pass
        await conn.rollback()
        await conn.close()

    asyncio.run(main())
    assert (pg_db.value(), pg_db.highest("r")) == ("seven again", 7)


def test_async_admit_inside_callers_transaction(pg_db: DB, postgres: PostgresServer) -> None:
    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(postgres.dsn) as conn:
            await pg_db.fence.ensure_table_async(conn)
            async with conn.transaction(), conn.cursor() as cur:
                await pg_db.fence.admit_async(cur, "r", 3)
            with pytest.raises(StaleToken):
                async with conn.transaction(), conn.cursor() as cur:
                    await pg_db.fence.admit_async(cur, "r", 2)
                    await cur.execute(f"INSERT INTO {pg_db.data} (k, v) VALUES ('x', 'two')")

    asyncio.run(main())
    assert (pg_db.value(), pg_db.highest("r")) == (None, 3)


def test_async_concurrent_tasks_never_accept_a_lower_token(
    pg_db: DB, postgres: PostgresServer
) -> None:
    log = _unique("log")
    pg_db.run(f"CREATE TABLE {log} (id BIGSERIAL PRIMARY KEY, worker INT, token BIGINT)")
    refused: list[tuple[int, int]] = []

    connected: list[int] = []

    async def work(worker: int, start: asyncio.Event) -> None:
        pause = random.Random(worker).uniform
        async with await psycopg.AsyncConnection.connect(postgres.dsn) as conn:
            connected.append(worker)  # asyncio.Barrier needs Python 3.11
            if len(connected) == WORKERS:
                start.set()
            await start.wait()
            for token in _hand(worker, seed=7):
                try:
                    async with pg_db.fence.fenced_async(conn, "shared", token) as cur:
                        await cur.execute(
                            f"INSERT INTO {log} (worker, token) VALUES (%s, %s)", (worker, token)
                        )
                except StaleToken as e:
                    refused.append((token, e.highest))
                await asyncio.sleep(pause(0, 0.002))

    async def main() -> None:
        start = asyncio.Event()
        await asyncio.gather(*(work(w, start) for w in range(WORKERS)))

    asyncio.run(main())
    log_rows = pg_db.query(f"SELECT worker, token FROM {log} ORDER BY id")
    _check_log(log_rows, refused)


def test_fenced_async_needs_an_async_connection(pg_db: DB) -> None:
    conn = pg_db.connect()
    with pytest.raises(InvalidArgument, match="AsyncConnection"):
        pg_db.fence.fenced_async(conn, "r", 1)
    conn.close()


# -- a read-write lock's reads and writes ------------------------------------------------------


def _admit(db: DB, mode: str, token: int, conn: Any = None) -> StaleToken | None:
    """Admit one read or write of resource ``doc`` in a transaction of its own."""
    conn = conn or db.connect()
    try:
        cur = conn.cursor()
        admit = db.fence.admit_read if mode == "read" else db.fence.admit_write
        try:
            admit(cur, "doc", token)
        except StaleToken as exc:
            conn.rollback()
            return exc
        conn.commit()
        return None
    finally:
        conn.close()


def test_readers_never_refuse_each_other_but_a_write_shuts_out_older_ones(db: DB) -> None:
    assert _admit(db, "read", 7) is None
    assert _admit(db, "read", 5) is None  # an older reader beside a newer one: both hold
    assert _admit(db, "read", 5) is None
    refused = _admit(db, "write", 6)  # a writer from before a reader that was served
    assert refused is not None and (refused.resource, refused.highest) == ("doc", 7)
    assert _admit(db, "write", 9) is None
    assert _admit(db, "write", 9) is None  # one writer, many writes
    refused = _admit(db, "read", 8)  # a reader from before the latest write
    assert refused is not None and refused.highest == 9
    assert _admit(db, "read", 10) is None
    assert db.highest("doc") == 9  # the resource's own row is the latest write


def test_a_resource_name_with_the_separator_is_refused(db: DB) -> None:
    conn = db.connect()
    with pytest.raises(InvalidArgument, match="x1f"):
        db.fence.admit_read(conn.cursor(), "doc\x1fhighest", 1)
    conn.close()


def test_postgres_an_uncommitted_write_blocks_an_older_reader_which_then_is_refused(
    pg_db: DB, postgres: PostgresServer
) -> None:
    a, b = pg_db.connect(), pg_db.connect()
    b_pid = b.info.backend_pid
    with a.transaction(), a.cursor() as cur:
        pg_db.fence.admit_write(cur, "doc", 8)
        thread, out = _in_thread(lambda: _admit(pg_db, "read", 5, b))
        _wait_until_blocked(postgres.dsn, b_pid)  # on the row the writer locked
        assert thread.is_alive()
    thread.join(10)
    assert isinstance(out[0], StaleToken) and out[0].highest == 8, out
    a.close()


def test_async_reads_and_writes(pg_db: DB, postgres: PostgresServer) -> None:
    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(postgres.dsn) as conn:
            async with conn.transaction(), conn.cursor() as cur:
                await pg_db.fence.admit_read_async(cur, "doc", 4)
            with pytest.raises(StaleToken):
                async with conn.transaction(), conn.cursor() as cur:
                    await pg_db.fence.admit_write_async(cur, "doc", 3)
            async with conn.transaction(), conn.cursor() as cur:
                await pg_db.fence.admit_write_async(cur, "doc", 6)
            with pytest.raises(StaleToken):
                async with conn.transaction(), conn.cursor() as cur:
                    await pg_db.fence.admit_read_async(cur, "doc", 5)

    asyncio.run(main())
    assert pg_db.highest("doc") == 6
