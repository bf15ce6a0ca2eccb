"""The protected resource of a chaos run: an SQLite file the workers write through (or around)
the fence, which keeps its own log of every write it accepted.

The resource lives on the host that runs the workers, whatever the store is: it stands for the
database, bucket or service that a real lock protects. It holds one value (a counter, a set kept
as one JSON document, or nothing for the election log) and the ``accepted`` table, written in the
same transaction as each write, which the checkers read after the run.

Fenced access admits the lease's token on *every* access, reads included, so that a newer
holder's read shuts out an older holder's later write (the read-modify-write is then safe);
unfenced access trusts the lock alone.

The ``run`` workload has no shared state here: its commands check no token, and what they did
is when they worked (each child's work file, `history.read_work`).

The ``partition`` workload keeps one counter per item of the group (table ``items``), each
behind its own fence (resource ``item/<item>``), so a write is judged by that item's token; its
``meta`` also holds the run's items, TTL and lock-delay, which the ``item-ownerless`` checker
needs. The ``semaphore`` workload keeps one such counter per permit slot (``slot-<i>``): a
permit's token is its slot's, and its ``meta`` holds the permits.

The ``rwlock`` workload keeps the counter, behind the fence of a read-write lock: a reader's
reads are admitted with `SQLFence.admit_read` (never refused by other readers), a writer's
accesses with `SQLFence.admit_write` (`Resource.read_shared`, `read_exclusive`,
`write_exclusive`); unfenced, both are plain transactions.

The ``guarded`` workload keeps its counter and log in the store itself instead (`guards`): the
file then only names the workload, and the store's URL is needed to create and read it. So does
the ``state`` workload, whose cursor is its leaders' ``lease.state``: the file names the
workload and the lock; the final cursor is read from the store after the run, and what was
acknowledged is in the history (no log of the store's own).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from .._errors import InvalidArgument
from .._lockstate import space_prefix
from .._url import open_store
from ..fence import SQLFence
from ..stores._spi import records_of
from .history import Accepted, ResourceLog

if TYPE_CHECKING:
    from .guards import Guard

RESOURCE = "resource"  # the fence's resource name
GUARDED = "guarded"  # the workload whose counter lives in the store
RUN = "run"  # the workload of real tenure run supervisors (`processes.RunWorker`)
PARTITION = "partition"  # members of a partition group, one fenced counter per item
SEMAPHORE = "semaphore"  # holders of a semaphore's permits, one fenced counter per slot
RWLOCK = "rwlock"  # readers and writers of a read-write lock, one counter behind its fence
HTTP = "http"  # the counter behind a real HTTP service and its fence (`service`)
STATE = "state"  # leaders advancing a cursor in the election's own state (lease.state)
CURSOR = "cursor"  # the state workload's key
PER_ITEM = (PARTITION, SEMAPHORE)  # the workloads whose resource is one counter per item
COUNTERS = ("counter", RWLOCK, HTTP)  # the workloads whose resource is one counter, value+1
_EMPTY: dict[str, Any] = {"counter": 0, "set": [], "election": None, RWLOCK: 0, HTTP: 0}


def partition_items(count: int) -> list[str]:
    """The items a ``partition`` run's group splits: ``item-0`` … ``item-<count-1>``."""
    return [f"item-{n}" for n in range(count)]


def slot_item(slot: int) -> str:
    """The item of a ``semaphore`` run that counts the writes of permit slot ``slot``."""
    return f"slot-{slot}"


def slot_items(permits: int) -> list[str]:
    return [slot_item(n) for n in range(permits)]


def item_resource(item: str) -> str:
    """The fence's resource name of one item of the ``partition`` workload."""
    return f"item/{item}"


def create_resource(
    path: Path | str,
    workload: str,
    store_url: str | None = None,
    settings: dict[str, Any] | None = None,
) -> None:
    """``settings`` (JSON values) go into ``meta`` for the checkers: the ``partition``
    workload's ``items``, ``ttl`` and ``lock_delay``."""
    if workload == GUARDED:
        with _guard(store_url) as guard:
            guard.setup()
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute("INSERT INTO meta VALUES ('workload', ?)", (workload,))
        for key, value in (settings or {}).items():
            db.execute("INSERT INTO meta VALUES (?, ?)", (key, json.dumps(value)))
        if workload in PER_ITEM:
            _create_items(db, (settings or {}).get("items", []))
        elif workload not in (GUARDED, RUN, STATE):
            _create_state(db, workload)
    finally:
        db.close()


def _create_state(db: sqlite3.Connection, workload: str) -> None:
    db.execute("CREATE TABLE state (value TEXT)")
    db.execute("INSERT INTO state VALUES (?)", (json.dumps(_EMPTY[workload]),))
    db.execute(
        "CREATE TABLE accepted (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
        " process TEXT NOT NULL, token INTEGER NOT NULL, data TEXT NOT NULL, t REAL)"
    )
    SQLFence().ensure_table(db)


def _create_items(db: sqlite3.Connection, items: list[str]) -> None:
    db.execute("CREATE TABLE items (item TEXT PRIMARY KEY, value INTEGER NOT NULL)")
    db.executemany("INSERT INTO items VALUES (?, 0)", [(item,) for item in items])
    db.execute(
        "CREATE TABLE accepted (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
        " process TEXT NOT NULL, token INTEGER NOT NULL, data TEXT NOT NULL, t REAL)"
    )
    SQLFence().ensure_table(db)


class Resource:
    """One worker's connection to the resource."""

    def __init__(self, path: Path | str, process: str, fenced: bool) -> None:
        self.process = process
        self.fenced = fenced
        # check_same_thread: the partition workload writes from a thread of its own (only it).
        self._db = sqlite3.connect(path, isolation_level=None, timeout=60, check_same_thread=False)
        self._fence = SQLFence()

    @contextmanager
    def _access(self, token: int, resource: str = RESOURCE) -> Iterator[sqlite3.Cursor]:
        if self.fenced:
            with self._fence.fenced(self._db, resource, token) as cur:
                yield cur
            return
        cur = self._db.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            yield cur
            cur.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                cur.execute("ROLLBACK")
            raise

    def read(self, token: int) -> Any:
        """The current value (`StaleToken` if fenced and a newer token was seen)."""
        with self._access(token) as cur:
            (value,) = cur.execute("SELECT value FROM state").fetchone()
        return json.loads(value)

    def write(self, token: int, value: Any, data: dict[str, Any]) -> None:
        """Replace the value and log the write, in one transaction (`StaleToken` if fenced and
        refused: then nothing is written)."""
        with self._access(token) as cur:
            cur.execute("UPDATE state SET value = ?", (json.dumps(value),))
            cur.execute(
                "INSERT INTO accepted (process, token, data, t) VALUES (?, ?, ?, ?)",
                (self.process, token, json.dumps(data), time.monotonic()),
            )

    @contextmanager
    def _rw_access(self, token: int, mode: str) -> Iterator[sqlite3.Cursor]:
        """A transaction of the ``rwlock`` workload, admitting ``token`` as a reader's
        (``mode`` ``read``) or a writer's (``write``) when fenced; `StaleToken` if refused."""
        cur = self._db.cursor()
        cur.execute("BEGIN IMMEDIATE")  # the admits write the fence's rows
        try:
            if self.fenced and mode == "read":
                self._fence.admit_read(cur, RESOURCE, token)
            elif self.fenced:
                self._fence.admit_write(cur, RESOURCE, token)
            yield cur
            cur.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                cur.execute("ROLLBACK")
            raise
        finally:
            cur.close()

    def read_shared(self, token: int) -> int:
        """The ``rwlock`` workload: a reader's read of the counter (fenced: `admit_read`)."""
        with self._rw_access(token, "read") as cur:
            (value,) = cur.execute("SELECT value FROM state").fetchone()
        return int(json.loads(value))

    def read_exclusive(self, token: int) -> int:
        """The ``rwlock`` workload: a writer's read of the counter, admitted as a write
        (fenced: `admit_write`), so that from this read on no older reader or writer is served
        (see `workloads.rwlock`)."""
        with self._rw_access(token, "write") as cur:
            (value,) = cur.execute("SELECT value FROM state").fetchone()
        return int(json.loads(value))

    def write_exclusive(self, token: int, value: int, data: dict[str, Any]) -> None:
        """The ``rwlock`` workload: a writer sets the counter and logs the write, in one
        transaction (fenced: `admit_write`; `StaleToken` if refused: nothing is written)."""
        with self._rw_access(token, "write") as cur:
            cur.execute("UPDATE state SET value = ?", (json.dumps(value),))
            cur.execute(
                "INSERT INTO accepted (process, token, data, t) VALUES (?, ?, ?, ?)",
                (self.process, token, json.dumps(data), time.monotonic()),
            )

    def read_item(self, token: int, item: str) -> int:
        """The ``partition`` workload: ``item``'s counter (fenced by the item's own token)."""
        with self._access(token, item_resource(item)) as cur:
            (value,) = cur.execute("SELECT value FROM items WHERE item = ?", (item,)).fetchone()
        return int(value)

    def write_item(self, token: int, item: str, value: int, data: dict[str, Any]) -> None:
        """Set ``item``'s counter and log the write (``data`` names the item), in one
        transaction; `StaleToken` if fenced and a newer token of the item was seen."""
        with self._access(token, item_resource(item)) as cur:
            cur.execute("UPDATE items SET value = ? WHERE item = ?", (value, item))
            cur.execute(
                "INSERT INTO accepted (process, token, data, t) VALUES (?, ?, ?, ?)",
                (self.process, token, json.dumps(data), time.monotonic()),
            )

    def close(self) -> None:
        self._db.close()


def _guard(store_url: str | None) -> Guard:
    from .guards import open_guard  # every store's client: imported for this workload only

    if store_url is None:
        raise InvalidArgument(
            f"the {GUARDED} workload keeps its counter in the store: give its URL"
        )
    return open_guard(store_url)


def read_resource(path: Path | str, store_url: str | None = None) -> ResourceLog:
    db = sqlite3.connect(path)
    try:
        (workload,) = db.execute("SELECT value FROM meta WHERE key = 'workload'").fetchone()
        if workload == GUARDED:
            with _guard(store_url) as guard:
                return guard.read_log()
        if workload == RUN:
            return ResourceLog(RUN, [], None)
        settings = {
            key: json.loads(value)
            for key, value in db.execute("SELECT key, value FROM meta WHERE key != 'workload'")
        }
        if workload == STATE:
            return ResourceLog(STATE, [], _final_cursor(store_url, settings["lock"]), settings)
        if workload in PER_ITEM:
            final: Any = json.dumps(dict(db.execute("SELECT item, value FROM items ORDER BY item")))
        else:
            (final,) = db.execute("SELECT value FROM state").fetchone()
        rows = db.execute(
            "SELECT seq, process, token, data, t FROM accepted ORDER BY seq"
        ).fetchall()
    finally:
        db.close()
    accepted = [Accepted(seq, p, token, json.loads(data), t) for seq, p, token, data, t in rows]
    value = json.loads(final)
    return ResourceLog(workload, accepted, sorted(value) if workload == "set" else value, settings)


def _final_cursor(store_url: str | None, lock: str) -> int:
    """The ``state`` workload's cursor as the store keeps it after the run (0: never written)."""
    if store_url is None:
        raise InvalidArgument(f"the {STATE} workload keeps its cursor in the store: give its URL")

    async def read() -> str | None:
        store = open_store(store_url)
        try:
            record = await records_of(store).read_record(space_prefix(lock) + CURSOR)
        finally:
            await store.aclose()
        return None if record is None else record.value

    value = anyio.run(read)
    return int(value or 0)
