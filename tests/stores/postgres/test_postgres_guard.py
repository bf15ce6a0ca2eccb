"""The PostgreSQL store's public guard: `PostgresStore.holds`, the predicate over the store's own
tables that a caller's write checks in its own transaction, on a `PostgresStore.connect`
connection."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

import pytest
from psycopg import sql

import tenure
from tenure.stores._spi import Grant
from tenure.stores.postgres import PostgresStore
from tenure.stores.postgres.server import PostgresServer

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_holds_is_true_for_the_holders_token_only(postgres: PostgresServer) -> None:
    store = PostgresStore.from_url(f"{postgres.dsn}?schema=t_{uuid4().hex[:12]}")
    try:
        session = await store.open_session(30, tenure.Holder("test", 1))
        first = await store.attempt(session, "guarded", None, enqueue=False)
        assert isinstance(first, Grant)
        conn = await store.connect()
        try:
            assert conn.autocommit
            isolation = await (await conn.execute("SHOW default_transaction_isolation")).fetchone()
            assert isolation == ("read committed",)

            async def holds(held: int, **names: str) -> Any:
                params = {names.get("name", "name"): "guarded", names.get("token", "token"): held}
                query = sql.SQL("SELECT {}").format(store.holds(**names))
                row = await (await conn.execute(query, params)).fetchone()
                assert row is not None
                return row[0]

            assert await holds(first.token) is True
            assert await holds(first.token, name="lock", token="fence") is True
            assert await holds(first.token + 1) is False
            await store.release(session, "guarded", first.token)
            assert await holds(first.token) is False
            second = await store.attempt(session, "guarded", None, enqueue=False)
            assert isinstance(second, Grant) and second.token > first.token
            assert await holds(second.token) is True
            assert await holds(first.token) is False  # an older token
        finally:
            await conn.close()
        await store.close_session(session)
    finally:
        await store.aclose()
