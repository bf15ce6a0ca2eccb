"""tenure.idempotency.SQLIdempotency against real SQLite files and a real PostgreSQL server: a
unique constraint admits one claimant, a replay returns the stored result, another request is
refused, a dead worker's claim is taken over with a higher token and its completion refused."""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tenure import InvalidArgument, KeyReused, NotAcquired, StaleToken
from tenure.idempotency import SQLClaim, SQLIdempotency, fingerprint
from tenure.stores.postgres.server import PostgresServer

Connect = Callable[[], Any]


@pytest.fixture(params=["sqlite", "postgres"])
def connect(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Connect]:
    if request.param == "sqlite":
        path = tmp_path / "app.db"
        yield lambda: sqlite3.connect(path, timeout=30, isolation_level=None)
        return
    server: PostgresServer = request.getfixturevalue("postgres")
    yield lambda: psycopg.connect(server.dsn)


@pytest.fixture
def keys(connect: Connect) -> Iterator[SQLIdempotency]:
    keys = SQLIdempotency(f"idem_{uuid.uuid4().hex[:12]}")
    conn = connect()
    keys.ensure_table(conn)
    keys.ensure_table(conn)  # again: nothing changes
    conn.close()
    yield keys
    conn = connect()
    with conn:
        conn.execute(f"DROP TABLE {keys.table}")


def rows(connect: Connect, keys: SQLIdempotency) -> list[tuple[Any, ...]]:
    conn = connect()
    try:
        cur = conn.cursor()
        cur.execute(f"SELECT key, state, token, result FROM {keys.table} ORDER BY key")
        return [tuple(r) for r in cur.fetchall()]
    finally:
        conn.close()


def test_a_replay_returns_the_stored_result_without_running_again(
    connect: Connect, keys: SQLIdempotency
) -> None:
    conn, runs = connect(), []

    def charge(claim: SQLClaim) -> dict[str, Any]:
        runs.append(claim.token)
        return {"charge": "ch_1", "cents": 500}

    fp = fingerprint({"cents": 500})
    assert keys.run(conn, "req-1", fp, charge) == {"charge": "ch_1", "cents": 500}
    assert keys.run(conn, "req-1", fp, charge) == {"charge": "ch_1", "cents": 500}
    assert runs == [1]
    replay = keys.claim(conn, "req-1", fp)
    assert not replay and replay.state == "done" and replay.token == 1
    assert rows(connect, keys) == [("req-1", "done", 1, '{"charge": "ch_1", "cents": 500}')]


def test_the_unique_constraint_admits_one_of_two_concurrent_claimants(
    connect: Connect, keys: SQLIdempotency
) -> None:
    barrier, got = threading.Barrier(2), []

    def claimant() -> None:
        conn = connect()
        try:
            barrier.wait()
            got.append(keys.claim(conn, "req-2", "f"))
        finally:
            conn.close()

    threads = [threading.Thread(target=claimant) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(claim.state for claim in got) == ["claimed", "running"]
    with pytest.raises(NotAcquired, match="another worker"):
        keys.run(connect(), "req-2", "f", lambda claim: "never")


def test_the_same_key_for_another_request_is_refused(
    connect: Connect, keys: SQLIdempotency
) -> None:
    conn = connect()
    claim = keys.claim(conn, "req-3", "fp-a")
    with pytest.raises(KeyReused, match="first used for another request"):
        keys.claim(conn, "req-3", "fp-b")
    keys.complete(conn, claim, 1)
    with pytest.raises(KeyReused):
        keys.run(conn, "req-3", "fp-b", lambda claim: 2)
    assert rows(connect, keys) == [("req-3", "done", 1, "1")]


def test_a_dead_workers_claim_is_taken_over_and_its_completion_refused(
    connect: Connect, keys: SQLIdempotency
) -> None:
    short = SQLIdempotency(keys.table, ttl=0.2)  # the dead worker's claim is trusted 0.2 s
    old_conn, new_conn = connect(), connect()
    old = short.claim(old_conn, "req-4", "f")
    assert keys.claim(new_conn, "req-4", "f").state == "running"  # live: not taken over
    time.sleep(0.4)  # by the database's clock, the old claim has expired
    new = keys.claim(new_conn, "req-4", "f")
    assert new and new.token == old.token + 1 == 2
    with pytest.raises(StaleToken) as refused:
        short.complete(old_conn, old, "the old worker's result")
    assert (refused.value.token, refused.value.highest) == (1, 2)
    keys.complete(new_conn, new, "the new worker's result")
    assert keys.claim(old_conn, "req-4", "f").result == "the new worker's result"


def test_an_abandoned_claim_is_taken_over_at_once(connect: Connect, keys: SQLIdempotency) -> None:
    conn = connect()

    def declined(claim: SQLClaim) -> None:
        raise RuntimeError("declined")

    with pytest.raises(RuntimeError):
        keys.run(conn, "req-5", "f", declined)
    assert keys.run(conn, "req-5", "f", lambda claim: claim.token) == 2


def test_a_stored_result_expires_and_the_key_is_free_again(
    connect: Connect, keys: SQLIdempotency
) -> None:
    conn = connect()
    brief = SQLIdempotency(keys.table, retention=0)
    assert brief.run(conn, "req-6", "f", lambda claim: "first") == "first"
    again = keys.claim(conn, "req-6", "another request")  # expired: free for anyone
    assert again and again.token == 2
    keys.complete(conn, again, "second")
    assert keys.run(conn, "req-6", "another request", lambda claim: "never") == "second"


def test_bad_input_is_refused_and_nothing_is_written(
    connect: Connect, keys: SQLIdempotency
) -> None:
    conn = connect()
    for bad in ("", "a\nb", 7):
        with pytest.raises(InvalidArgument):
            keys.claim(conn, bad, "f")  # type: ignore[arg-type]
    claim = keys.claim(conn, "req-7", "f")
    with pytest.raises(InvalidArgument, match="JSON"):
        keys.complete(conn, claim, {1, 2})
    with pytest.raises(InvalidArgument, match="table name"):
        SQLIdempotency("t; DROP TABLE x")
    with pytest.raises(InvalidArgument, match="ttl"):
        SQLIdempotency(ttl=0)
    with pytest.raises(InvalidArgument, match="sqlite3 or psycopg"):
        keys.claim(object(), "k", "f")
    assert rows(connect, keys) == [("req-7", "running", 1, None)]


def test_psycopg_dict_rows_and_a_connection_in_a_transaction(
    postgres: PostgresServer,
) -> None:
    keys = SQLIdempotency(f"idem_{uuid.uuid4().hex[:12]}")
    with psycopg.connect(postgres.dsn, row_factory=dict_row) as conn:
        keys.ensure_table(conn)
        assert keys.run(conn, "k", "f", lambda claim: [claim.token]) == [1]
        assert keys.claim(conn, "k", "f").result == [1]
        conn.execute("SELECT 1")  # the caller's transaction is open
        with pytest.raises(InvalidArgument, match="commit or roll back"):
            keys.claim(conn, "k", "f")
        conn.rollback()
        conn.execute(f"DROP TABLE {keys.table}")
        conn.commit()
