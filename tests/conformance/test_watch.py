"""The store calls leader election is built on: ``proclaim`` and ``watch``, on every store."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from tenure._election import MAX_VALUE
from tenure._url import open_store
from tenure.stores._spi import Change, Grant, Holder, Store, Watch

pytestmark = pytest.mark.anyio


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    store = open_store(store_url)
    try:
        yield store
    finally:
        await store.aclose()


async def grant(store: Store, session: object, name: str) -> int:
    outcome = await store.attempt(session, name, None, False)  # type: ignore[arg-type]
    assert isinstance(outcome, Grant), outcome
    return outcome.token


async def collect(watch: Watch, count: int, timeout: float = 10.0) -> list[Change]:
    changes: list[Change] = []
    with anyio.fail_after(timeout):
        while len(changes) < count:
            changes.extend(await watch.next(timeout))
    return changes


def states(changes: list[Change]) -> list[tuple[int, str | None] | None]:
    return [None if c.holder is None else (c.holder.token, c.holder.value) for c in changes]


async def test_every_grant_value_and_release_is_reported_in_order(store: Store) -> None:
    one = await store.open_session(10, Holder("h", 1, "one"))
    two = await store.open_session(10, Holder("h", 2, "two"))
    watch = await store.watch("e")
    try:
        first = await grant(store, one, "e")
        assert await store.proclaim(one, "e", first, "leader one")
        await store.release(one, "e", first)
        second = await grant(store, two, "e")
        assert await store.proclaim(two, "e", second, "leader two ✓")
        changes = await collect(watch, 5)
        assert states(changes) == [
            (first, None),
            (first, "leader one"),
            None,
            (second, None),
            (second, "leader two ✓"),
        ]
        assert all(c.name == "e" for c in changes)
        last = changes[-1].holder
        assert last is not None and last.holder.label == "two"
        [info] = await store.locks("e")
        assert (info.token, info.value) == (second, "leader two ✓")
        assert await watch.next(0.3) == []  # nothing else happened
    finally:
        await watch.aclose()
        await store.close_session(one)
        await store.close_session(two)


async def test_proclaim_needs_the_holders_session_and_token(store: Store) -> None:
    one = await store.open_session(10, Holder("h", 1, "one"))
    two = await store.open_session(10, Holder("h", 2, "two"))
    try:
        token = await grant(store, one, "p")
        assert not await store.proclaim(two, "p", token, "usurper")
        assert not await store.proclaim(one, "p", token + 1, "wrong token")
        assert await store.proclaim(one, "p", token, "mine")
        await store.release(one, "p", token)
        assert not await store.proclaim(one, "p", token, "after release")
        assert await store.locks("p") == []
    finally:
        await store.close_session(one)
        await store.close_session(two)


async def test_the_longest_values_are_reported_whole(store: Store) -> None:
    """A leader's value may be MAX_VALUE characters: of 4 bytes each in UTF-8, or of 6 bytes
    each escaped in JSON; every one is reported whole, in order."""
    values = ["\U0001f451" * MAX_VALUE, '"\x01' * (MAX_VALUE // 2), "short"]
    session = await store.open_session(30, Holder("h", 1, "long"))
    watch = await store.watch("long")
    try:
        token = await grant(store, session, "long")
        for value in values:
            assert await store.proclaim(session, "long", token, value)
        changes = await collect(watch, 4)
        assert states(changes) == [(token, None), *((token, value) for value in values)]
        [info] = await store.locks("long")
        assert info.value == "short"
    finally:
        await watch.aclose()
        await store.close_session(session)


async def test_a_hand_over_to_a_waiter_is_reported(store: Store) -> None:
    """A release that hands the lock to the next waiter is one change with the new token."""
    one = await store.open_session(10, Holder("h", 1, "one"))
    two = await store.open_session(10, Holder("h", 2, "two"))
    watch = await store.watch("q")
    try:
        first = await grant(store, one, "q")
        busy = await store.attempt(two, "q", None, True)
        assert not isinstance(busy, Grant)
        await store.release(one, "q", first)
        with anyio.fail_after(10):
            while True:
                outcome = await store.attempt(two, "q", busy.ticket, True)
                if isinstance(outcome, Grant):
                    break
                busy = outcome
                with anyio.move_on_after(1.0):  # the caller times a wait, not the store
                    await store.wait(busy.ticket, busy, 1.0)
        changes = await collect(watch, 2)
        tokens = [c.holder.token for c in changes if c.holder is not None]
        assert tokens[0] == first and tokens[-1] == outcome.token > first
    finally:
        await watch.aclose()
        await store.close_session(one)
        await store.close_session(two)


async def test_watches_see_changes_made_through_another_connection(
    store: Store, store_url: str
) -> None:
    other = open_store(store_url)
    session = await other.open_session(10, Holder("h", 3, "other"))
    watch = await store.watch("x")
    try:
        token = await grant(other, session, "x")
        await grant(other, session, "x/y")  # another name: not reported
        assert await other.proclaim(session, "x", token, "from afar")
        changes = await collect(watch, 2)
        assert states(changes) == [(token, None), (token, "from afar")]
        assert await watch.next(0.3) == []
    finally:
        await watch.aclose()
        await other.close_session(session)
        await other.aclose()


async def test_closing_the_holders_session_is_reported(store: Store) -> None:
    one = await store.open_session(10, Holder("h", 1, "one"))
    watch = await store.watch("c")
    try:
        await grant(store, one, "c")
        # Seen held first: ZooKeeper's watch may miss a grant and release within one read
        # (documented in its module); what is tested here is that the close is reported.
        assert (await collect(watch, 1))[-1].holder is not None
        await store.close_session(one)
        changes = await collect(watch, 1)
        assert changes[-1].holder is None
    finally:
        await watch.aclose()
