"""Records (the conditional writes under ``tenure once``) on every store: create only if absent,
replace only at the version last read, refused writes leave nothing, concurrent writers at one
version: exactly one wins, prefix listing in key order, keys of any allowed shape."""

from __future__ import annotations

import anyio
import pytest

from tenure._url import open_store
from tenure.stores._spi import Record

pytestmark = [pytest.mark.anyio, pytest.mark.offers("records")]


@pytest.fixture
def records_url(store_url: str) -> str:
    return store_url


async def test_create_only_if_absent_then_replace_at_the_version_read(records_url: str) -> None:
    store = open_store(records_url)
    try:
        assert await store.read_record("job/1") is None
        first = await store.write_record("job/1", '{"state": "running"}', 0)
        assert first is not None and first.version > 0
        assert first.key == "job/1" and first.value == '{"state": "running"}'
        assert await store.read_record("job/1") == first
        assert await store.write_record("job/1", "again", 0) is None  # it exists
        second = await store.write_record("job/1", '{"state": "done"}', first.version)
        assert second is not None and second.version != first.version
        assert await store.read_record("job/1") == second
        # A writer still holding the first version is refused, and nothing is written.
        assert await store.write_record("job/1", "late", first.version) is None
        assert await store.read_record("job/1") == second
        # A version that was never the record's is refused too.
        assert await store.write_record("job/2", "x", 12345) is None
        assert await store.read_record("job/2") is None
    finally:
        await store.aclose()


async def test_one_of_many_concurrent_writers_wins(records_url: str) -> None:
    stores = [open_store(records_url) for _ in range(4)]
    try:
        base = await stores[0].write_record("race", "v0", 0)
        assert base is not None
        won: list[Record] = []
        created: list[Record] = []

        async def write(index: int) -> None:
            result = await stores[index].write_record("race", f"w{index}", base.version)
            if result is not None:
                won.append(result)
            fresh = await stores[index].write_record("fresh", f"c{index}", 0)
            if fresh is not None:
                created.append(fresh)

        async with anyio.create_task_group() as tg:
            for index in range(len(stores)):
                tg.start_soon(write, index)
        assert len(won) == 1 and len(created) == 1
        assert await stores[0].read_record("race") == won[0]
        assert await stores[1].read_record("fresh") == created[0]
    finally:
        for store in stores:
            await store.aclose()


async def test_list_by_prefix_in_key_order(records_url: str) -> None:
    store = open_store(records_url)
    try:
        keys = ["a/2026-12-01T02:00:00Z", "a/2026-11-30T02:00:00Z", "ab/1", "a%2Fb/1", "b/1"]
        for key in keys:
            assert await store.write_record(key, key.upper(), 0) is not None
        listed = await store.list_records("a/")
        assert [r.key for r in listed] == ["a/2026-11-30T02:00:00Z", "a/2026-12-01T02:00:00Z"]
        assert [r.value for r in listed] == [k.upper() for k in (r.key for r in listed)]
        assert [r.key for r in await store.list_records("a")] == sorted(keys[:4])
        assert await store.list_records("zz/") == []
    finally:
        await store.aclose()


@pytest.mark.parametrize("key", ["ünïcode/ключ", "dots/../..", "spaces in/the key", "x" * 200])
async def test_keys_of_any_allowed_shape(records_url: str, key: str) -> None:
    store = open_store(records_url)
    try:
        written = await store.write_record(key, "v", 0)
        assert written is not None
        assert await store.read_record(key) == written
        assert [r.key for r in await store.list_records(key[:3])] == [key]
    finally:
        await store.aclose()
