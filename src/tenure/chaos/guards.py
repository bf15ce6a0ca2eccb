"""The ``guarded`` workload's resource: a counter and its log of accepted writes kept in the store
itself, written only while the store still says the writer's token holds the lock.

This is the other way to make a lock safe when the protected data lives in the store: no fence,
but the write and the check "this token still holds the lock" commit together, in one SQL
transaction (``UPDATE … WHERE EXISTS`` on the lock's row) or one etcd txn (a compare on the lock
key's create revision). A paused holder that wakes up after another took over finds its token
gone and writes nothing (`NotHeld`, a `StaleToken`). Unguarded (``--unfenced``), the same write
trusts the lock alone: the positive control, which must lose updates under pauses.

The read needs no guard: it comes after our grant, and a write accepted between our read and our
write was made by another token while it held the lock, i.e. after a grant that replaced our
token for good (tokens are never issued twice), so our own write is then refused.

The guard itself is each store's own, public one (``tenure.stores.sqlite.guard.holds``,
``PostgresStore.holds`` over ``PostgresStore.connect``, ``EtcdStore.guarded_txn``): the harness
keeps no copy of a store's schema and reads no private attribute. One class per store, chosen by
the store URL (`open_guard`). The log is "counter"-shaped
(``{"old": n, "new": n+1}`` per write, in commit order), so the counter's checkers apply as they
are. ``setup`` resets the counter to 0 and empties the log, as each run starts a fresh resource.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import anyio

from .._errors import InvalidArgument, StaleToken, TenureError
from .._loop_thread import LoopThread
from ..stores._registry import BY_SCHEME
from ..stores.etcd import EtcdStore
from ..stores.etcd.keys import b64, prefix_end, put_op, unb64
from ..stores.etcd.transport import JSON
from ..stores.postgres import PostgresStore
from ..stores.postgres.connection import CALL_TIMEOUT
from ..stores.sqlite import SQLiteStore
from ..stores.sqlite.guard import holds as sqlite_holds
from .history import Accepted, ResourceLog

try:
    from psycopg import sql
except ImportError:  # the 'postgres' extra is not installed: PostgresStore.from_url says so
    sql = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from psycopg import AsyncConnection

T = TypeVar("T")
WORKLOAD = "counter"  # the shape of the log, for the checkers


class NotHeld(StaleToken):
    """The store no longer says ``token`` holds ``lock``: the guarded write was refused."""

    def __init__(self, lock: str, token: int) -> None:
        TenureError.__init__(self, f"token {token} no longer holds lock {lock!r}: write refused")
        self.resource = lock
        self.token = token
        self.highest = token  # a lower bound: the store's newer grants are not read here


class Guard(ABC):
    """The counter and its log in one store, for one lock."""

    def __init__(self, lock: str) -> None:
        self.lock = lock

    @abstractmethod
    def setup(self) -> None:
        """Create the counter (0) and an empty log, or reset them to that."""

    @abstractmethod
    def read(self) -> int: ...

    @abstractmethod
    def write(self, token: int, old: int, new: int, process: str, guarded: bool) -> None:
        """Set the counter to ``new`` and log the write, atomically; if ``guarded``, only while
        ``token`` holds the lock (else `NotHeld`, and nothing is written)."""

    @abstractmethod
    def read_log(self) -> ResourceLog: ...

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Guard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_guard(url: str, lock: str = "chaos") -> Guard:
    scheme = urlsplit(url).scheme.lower()
    entry = BY_SCHEME.get(scheme)
    guard = GUARDS.get(entry.key) if entry else None
    if guard is None:
        raise InvalidArgument(f"the guarded workload has no guard for {scheme!r} stores")
    return guard(url, lock)


def _data(old: int, new: int) -> dict[str, int]:
    return {"old": old, "new": new}


# -- SQLite ------------------------------------------------------------------------------------

_SQLITE_SETUP = """
CREATE TABLE IF NOT EXISTS tenure_chaos_counter (
    id INTEGER PRIMARY KEY CHECK (id = 1), value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tenure_chaos_log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    process TEXT NOT NULL, token INTEGER NOT NULL, data TEXT NOT NULL);
"""


class SQLiteGuard(Guard):
    """Tables ``tenure_chaos_counter`` and ``tenure_chaos_log`` in the store's own file."""

    def __init__(self, url: str, lock: str) -> None:
        super().__init__(lock)
        store = SQLiteStore.from_url(url)  # creates the store's file and tables if new
        anyio.run(store.aclose)
        self._db = sqlite3.connect(store.path, isolation_level=None, timeout=60)

    def setup(self) -> None:
        self._db.executescript(_SQLITE_SETUP)
        with self._transaction():
            self._db.execute("DELETE FROM tenure_chaos_log")
            self._db.execute("INSERT OR REPLACE INTO tenure_chaos_counter VALUES (1, 0)")

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back on any error (a refusal included)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise

    def read(self) -> int:
        (value,) = self._db.execute("SELECT value FROM tenure_chaos_counter").fetchone()
        return int(value)

    def write(self, token: int, old: int, new: int, process: str, guarded: bool) -> None:
        # BEGIN IMMEDIATE takes the database's one write lock, which every grant, hand-over,
        # release and sweep of the store takes too: no grant can commit between this check and
        # our commit, so holding the token at the check is holding it at commit.
        with self._transaction():
            held, params = sqlite_holds(self.lock, token)  # the clock read with the lock held
            if not guarded:
                held = "1"  # unguarded: trust the lock alone
            params["new"] = new
            update = f"UPDATE tenure_chaos_counter SET value = :new WHERE {held}"
            cur = self._db.execute(update, params)
            if cur.rowcount != 1:
                raise NotHeld(self.lock, token)
            self._db.execute(
                "INSERT INTO tenure_chaos_log (process, token, data) VALUES (?, ?, ?)",
                (process, token, json.dumps(_data(old, new))),
            )

    def read_log(self) -> ResourceLog:
        # seq is assigned under the write lock: its order is the commit order.
        rows = self._db.execute(
            "SELECT seq, process, token, data FROM tenure_chaos_log ORDER BY seq"
        ).fetchall()
        accepted = [Accepted(seq, proc, token, json.loads(data)) for seq, proc, token, data in rows]
        return ResourceLog(WORKLOAD, accepted, self.read())

    def close(self) -> None:
        self._db.close()


# -- PostgreSQL --------------------------------------------------------------------------------

_PG_SETUP = """
CREATE TABLE IF NOT EXISTS {s}.chaos_counter (
    id integer PRIMARY KEY CHECK (id = 1), value bigint NOT NULL);
CREATE TABLE IF NOT EXISTS {s}.chaos_log (
    seq bigserial PRIMARY KEY, process text NOT NULL, token bigint NOT NULL, data text NOT NULL);
TRUNCATE {s}.chaos_log;
INSERT INTO {s}.chaos_counter (id, value) VALUES (1, 0)
    ON CONFLICT (id) DO UPDATE SET value = excluded.value;
"""
# One statement, so one transaction in autocommit and no window for a paused client to hold
# locks in. The log's seq is drawn with the counter's row locked: its order is the commit order.
_PG_WRITE = """
WITH counted AS (
    UPDATE {s}.chaos_counter SET value = %(new)s WHERE id = 1 AND {held} RETURNING value)
INSERT INTO {s}.chaos_log (process, token, data)
SELECT %(process)s, %(token)s, %(data)s FROM counted RETURNING seq
"""


class PostgresGuard(Guard):
    """Tables ``chaos_counter`` and ``chaos_log`` in the store's own schema."""

    def __init__(self, url: str, lock: str) -> None:
        super().__init__(lock)
        self._store = PostgresStore.from_url(url)
        s = sql.Identifier(self._store.schema)
        held = self._store.holds("name", "token")  # the store's own test that a token holds
        self._setup = sql.SQL(_PG_SETUP).format(s=s)
        self._write = {
            True: sql.SQL(_PG_WRITE).format(s=s, held=held),
            False: sql.SQL(_PG_WRITE).format(s=s, held=sql.SQL("true")),
        }
        self._read = sql.SQL("SELECT value FROM {s}.chaos_counter WHERE id = 1").format(s=s)
        log = "SELECT seq, process, token, data FROM {s}.chaos_log ORDER BY seq"
        self._log = sql.SQL(log).format(s=s)
        self._conn: AsyncConnection[Any] | None = None
        self._loop = LoopThread("tenure-guard")

    def setup(self) -> None:
        self._loop.call(self._create_store_schema)
        self._loop.call(self._fetch, self._setup, None)

    async def _create_store_schema(self) -> None:
        """The store creates its schema (the ``locks`` table) on first use: use it once."""
        try:
            await self._store.locks()
        finally:
            await self._store.aclose()

    def read(self) -> int:
        return int(self._loop.call(self._fetch, self._read, None)[0][0])

    def write(self, token: int, old: int, new: int, process: str, guarded: bool) -> None:
        data = json.dumps(_data(old, new))
        params = {"new": new, "name": self.lock, "token": token, "process": process, "data": data}
        if not self._loop.call(self._fetch, self._write[guarded], params):
            raise NotHeld(self.lock, token)

    def read_log(self) -> ResourceLog:
        rows = self._loop.call(self._fetch, self._log, None)
        accepted = [Accepted(seq, proc, token, json.loads(data)) for seq, proc, token, data in rows]
        return ResourceLog(WORKLOAD, accepted, self.read())

    async def _fetch(self, query: sql.Composed, params: dict[str, Any] | None) -> list[Any]:
        """Run ``query`` in autocommit, within the store's call timeout (a blackholed link must
        not hang a worker). A failed call drops the connection: the next one starts afresh."""
        try:
            with anyio.fail_after(CALL_TIMEOUT):
                conn = await self._connection()
                cur = await conn.execute(query, params)
                return await cur.fetchall() if cur.description is not None else []
        except BaseException:
            await self._drop()
            raise

    async def _connection(self) -> AsyncConnection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = await self._store.connect()  # autocommit, READ COMMITTED
        return self._conn

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with anyio.CancelScope(shield=True):
                await conn.close()

    def close(self) -> None:
        self._loop.call(self._drop)
        self._loop.close()


# -- etcd --------------------------------------------------------------------------------------


class EtcdGuard(Guard):
    """Keys ``<namespace>/chaos-guarded/counter`` and ``…/log/<unique>``, beside the store's
    ``<namespace>/locks/`` range (never inside a lock's range, where they would queue)."""

    def __init__(self, url: str, lock: str) -> None:
        super().__init__(lock)
        # Our own store instance, on our own loop; its guarded_txn compares the very lock key
        # (and create revision) the store grants.
        self._store = EtcdStore.from_url(url)
        root = f"{self._store.namespace}/chaos-guarded/".encode()
        self._counter = root + b"counter"
        self._entries = root + b"log/"
        self._loop = LoopThread("tenure-guard")

    async def _call(self, path: str, body: JSON) -> JSON:
        return await self._store.request(path, body)

    def setup(self) -> None:
        entries = {"key": b64(self._entries), "range_end": b64(prefix_end(self._entries))}
        ops = [{"request_delete_range": entries}, put_op(self._counter, b"0")]
        self._loop.call(self._call, "kv/txn", {"success": ops})

    def read(self) -> int:
        answer = self._loop.call(self._call, "kv/range", {"key": b64(self._counter)})
        return int(unb64(answer["kvs"][0]["value"]))

    def write(self, token: int, old: int, new: int, process: str, guarded: bool) -> None:
        # etcd applies a txn's compare and its puts at one revision: the write lands only while
        # the lock key created at ``token`` exists (deleted by release and by the lease's end).
        entry = {"process": process, "token": token, "data": _data(old, new)}
        ops = [
            put_op(self._counter, str(new)),
            put_op(self._entries + uuid.uuid4().hex.encode(), json.dumps(entry)),
        ]
        # Unguarded: the same ops on the failure branch too, so they apply either way (the same
        # requests and timing as the guarded write: only the guard differs).
        failure = () if guarded else ops
        done = self._loop.call(self._store.guarded_txn, self.lock, token, ops, failure)
        if not done.held and guarded:
            raise NotHeld(self.lock, token)

    def read_log(self) -> ResourceLog:
        body = {"key": b64(self._entries), "range_end": b64(prefix_end(self._entries))}
        kvs = self._loop.call(self._call, "kv/range", body).get("kvs", [])
        # One entry per txn, so its mod revision orders the log as etcd applied it.
        accepted = []
        for kv in sorted(kvs, key=lambda kv: int(kv["mod_revision"])):
            entry = json.loads(unb64(kv["value"]))
            revision = int(kv["mod_revision"])
            accepted.append(Accepted(revision, entry["process"], entry["token"], entry["data"]))
        return ResourceLog(WORKLOAD, accepted, self.read())

    def close(self) -> None:
        self._loop.call(self._store.aclose)
        self._loop.close()


GUARDS: dict[str, Callable[[str, str], Guard]] = {
    "sqlite": SQLiteGuard,
    "postgres": PostgresGuard,
    "etcd": EtcdGuard,
}
"""The stores with a guarded write (each store's own public guard), by registry key."""
