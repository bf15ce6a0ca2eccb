"""tenure.optimistic.update_row against real SQLite files and a real PostgreSQL server: two
writers that read the same version conflict (a barrier holds both between read and write), the
loser computes again from the winner's row and no update is lost; without the version check the
same run loses one; a bounded retry gives up with WriteConflict and writes nothing."""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tenure import InvalidArgument, WriteConflict
from tenure.optimistic import update_row
from tenure.stores.postgres.server import PostgresServer

Connect = Callable[[], Any]


@pytest.fixture(params=["sqlite", "postgres"])
def connect(request: pytest.FixtureRequest, tmp_path: Path) -> Connect:
    if request.param == "sqlite":
        path = tmp_path / "app.db"
        return lambda: sqlite3.connect(path, timeout=30, isolation_level=None)
    server: PostgresServer = request.getfixturevalue("postgres")
    return lambda: psycopg.connect(server.dsn)


@pytest.fixture
def table(connect: Connect) -> Iterator[str]:
    name = f"accounts_{uuid.uuid4().hex[:12]}"
    with connect() as conn:
        conn.execute(
            f"CREATE TABLE {name} (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL,"
            " version INTEGER NOT NULL DEFAULT 1)"
        )
        conn.execute(f"INSERT INTO {name} (id, balance) VALUES (1, 100)")
    yield name
    with connect() as conn:
        conn.execute(f"DROP TABLE {name}")


def balance(connect: Connect, table: str) -> tuple[int, int]:
    conn = connect()
    try:
        row = conn.execute(f"SELECT balance, version FROM {table} WHERE id = 1").fetchone()
        return row[0], row[1]
    finally:
        conn.close()


def two_writers(connect: Connect, write: Callable[[Any, int, Callable[[], None]], Any]) -> list:
    """Two threads, each on its own connection, each adding its amount; both have read the row
    before either writes (``meet`` is a barrier the writer calls between its read and write)."""
    barrier, outcomes = threading.Barrier(2), []

    def writer(amount: int) -> None:
        conn = connect()
        try:
            outcomes.append(write(conn, amount, barrier.wait))
        except Exception as exc:
            outcomes.append(exc)
        finally:
            conn.close()

    threads = [threading.Thread(target=writer, args=(amount,)) for amount in (10, 20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return outcomes


def versioned(table: str, attempts: int = 5) -> Callable[[Any, int, Callable[[], None]], Any]:
    def write(conn: Any, amount: int, meet: Callable[[], None]) -> Any:
        calls = []

        def change(row: dict[str, Any]) -> dict[str, Any]:
            calls.append(row["version"])
            if len(calls) == 1:
                meet()  # both writers have read version 1
            return {"balance": row["balance"] + amount}

        row = update_row(conn, table, 1, change, attempts=attempts)
        return row, calls

    return write


def test_two_conflicting_writers_lose_no_update(connect: Connect, table: str) -> None:
    outcomes = two_writers(connect, versioned(table))
    assert balance(connect, table) == (130, 3)
    calls = sorted(calls for _, calls in outcomes)
    assert calls == [[1], [1, 2]]  # the loser computed again from the winner's row
    assert sorted(row["version"] for row, _ in outcomes) == [2, 3]


def test_without_the_version_check_the_same_run_loses_an_update(
    connect: Connect, table: str
) -> None:
    def naive(conn: Any, amount: int, meet: Callable[[], None]) -> None:
        (was,) = conn.execute(f"SELECT balance FROM {table} WHERE id = 1").fetchone()
        conn.commit()
        meet()
        conn.execute(f"UPDATE {table} SET balance = {was + amount} WHERE id = 1")
        conn.commit()

    assert two_writers(connect, naive) == [None, None]
    assert balance(connect, table)[0] in (110, 120)  # one of the two updates was lost


def test_a_bounded_retry_gives_up_and_writes_nothing(connect: Connect, table: str) -> None:
    outcomes = two_writers(connect, versioned(table, attempts=1))
    [refused] = [o for o in outcomes if isinstance(o, Exception)]
    assert isinstance(refused, WriteConflict) and refused.attempts == 1
    assert "changed by another writer on each of 1 attempts" in str(refused)
    [(row, _)] = [o for o in outcomes if not isinstance(o, Exception)]
    assert balance(connect, table) == (row["balance"], 2)


def test_nothing_to_change_and_bad_input(connect: Connect, table: str) -> None:
    conn = connect()
    try:
        assert update_row(conn, table, 1, lambda row: {}) == {"id": 1, "balance": 100, "version": 1}
        with pytest.raises(InvalidArgument, match="no row"):
            update_row(conn, table, 2, lambda row: {"balance": 0})
        with pytest.raises(InvalidArgument, match="table name"):
            update_row(conn, "accounts; DROP TABLE x", 1, lambda row: {})
        with pytest.raises(InvalidArgument, match="column name"):
            update_row(conn, table, 1, lambda row: {"balance = 0 --": 1})
        with pytest.raises(InvalidArgument, match="may not set 'version'"):
            update_row(conn, table, 1, lambda row: {"version": 7})
        with pytest.raises(InvalidArgument, match="attempts"):
            update_row(conn, table, 1, lambda row: {}, attempts=0)
        assert balance(connect, table) == (100, 1)  # nothing was written
    finally:
        conn.close()
