"""The embedded store's public guard: `holds` is true for the lock's holder only, judged as the
store judges one, inside the caller's own write transaction on the store's file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest

from tenure.stores._spi import Grant, Holder
from tenure.stores.sqlite import SQLiteStore
from tenure.stores.sqlite.guard import holds

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_holds_is_true_for_the_holders_token_only(tmp_path: Path) -> None:
    store = SQLiteStore.from_url(f"sqlite:///{tmp_path / 's.db'}")
    raw = sqlite3.connect(store.path, isolation_level=None)

    def held(token: int) -> bool:
        raw.execute("BEGIN IMMEDIATE")
        try:
            predicate, params = holds("g", token)
            # The caller's own :name and :token beside the guard's: no collision.
            query = f"SELECT :name = 'mine' AND :token = -1 AND {predicate}"
            (answer,) = raw.execute(query, {"name": "mine", "token": -1, **params}).fetchone()
            return bool(answer)
        finally:
            raw.execute("ROLLBACK")

    try:
        session = await store.open_session(10, Holder("h", 1))
        first = await store.attempt(session, "g", None, False)
        assert isinstance(first, Grant)
        assert held(first.token)
        assert not held(first.token + 1)
        await store.release(session, "g", first.token)
        assert not held(first.token)  # released
        second = await store.attempt(session, "g", None, False)
        assert isinstance(second, Grant) and second.token > first.token
        assert held(second.token)
        assert not held(first.token)  # an older token of the same name
        await store.close_session(session)
        assert not held(second.token)
        # Expired without a release: no longer a holder, by the same boot clock.
        short = await store.open_session(0.2, Holder("h", 2))
        third = await store.attempt(short, "g", None, False)
        assert isinstance(third, Grant)
        assert held(third.token)
        await anyio.sleep(0.3)
        assert not held(third.token)
    finally:
        raw.close()
        await store.aclose()
