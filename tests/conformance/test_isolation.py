"""Isolation on every store: names that look like paths or patterns are separate locks, bad names
are refused before the store is touched, namespaces do not see each other, and only the holder
(its session and token) can release or proclaim."""

from __future__ import annotations

import re

import pytest

import tenure
from tenure import InvalidArgument, NotAcquired
from tenure._url import open_store
from tenure.stores._spi import Grant, Holder

pytestmark = pytest.mark.anyio

# Path-, glob- and encoding-like names: each must be its own lock, listed exactly as written.
ODD_NAMES = [
    "a",
    "a/b",
    "a/b/c",
    "a/",
    "/a",
    "..",
    ".",
    "../x",
    "a/../b",
    "a%2Fb",
    "a:b",
    "a*",
    "a?[b]",
    "a b",
    "ä/ø",
    "日本語",
    "locks",
    "records",
    "é" * 127 + "x",  # 255 bytes of UTF-8: the longest name allowed
]
BAD_NAMES = [
    "",
    "nul\x00byte",
    "tab\there",
    "new\nline",
    "bidi\u202eflip",
    " leading",
    "x" * 256,
    "é" * 128,  # 256 bytes
]


def sibling(url: str) -> str:
    """The same server, another namespace (file, schema, key prefix or path) beside ``url``'s."""
    if url.startswith("sqlite:"):
        return re.sub(r"\.db$", "-other.db", url)
    if "schema=" in url or "prefix=" in url:
        return re.sub(r"((?:schema|prefix)=[A-Za-z0-9_.-]+)", r"\1o", url)
    return url + "o"  # etcd, ZooKeeper: the namespace is the URL's path


async def test_names_that_look_like_paths_are_separate_locks(store_url: str) -> None:
    async with tenure.connect_async(store_url) as a, tenure.connect_async(store_url) as b:
        leases = {name: await a.lock(name, ttl=10).acquire(wait=False) for name in ODD_NAMES}
        assert len({lease.token for lease in leases.values()}) >= 1
        assert sorted(info.name for info in await b.locks()) == sorted(ODD_NAMES)
        for name, lease in leases.items():
            [info] = await b.locks(name)
            assert (info.name, info.token) == (name, lease.token)
            with pytest.raises(NotAcquired):
                await b.lock(name, ttl=10).acquire(wait=False)
        await leases["a"].release()  # frees "a" only: not "a/b", "a/", "a*" or "a:b"
        assert sorted(info.name for info in await b.locks()) == sorted(set(ODD_NAMES) - {"a"})
        again = await b.lock("a", ttl=10).acquire(wait=False)
        assert again.token > leases["a"].token
        await again.release()
        for name in ODD_NAMES[1:]:
            await leases[name].release()
        assert await b.locks() == []


async def test_bad_names_are_refused_before_the_store_is_touched(store_url: str) -> None:
    async with tenure.connect_async(store_url) as client:
        for bad in BAD_NAMES:
            with pytest.raises(InvalidArgument, match="lock name"):
                await client.lock(bad, ttl=5).acquire(wait=False)
            with pytest.raises(InvalidArgument, match="lock name"):
                await client.locks(bad)
        assert await client.locks() == []


# Each under a prefix a recipe keeps for its own locks: a plain lock may not take one.
RESERVED_NAMES = ["semaphore/pool/0", "rwlock/doc/gate", "partitions/g/bell", "once:job/s1"]


async def test_names_a_recipe_keeps_are_refused_for_plain_locks(store_url: str) -> None:
    async with tenure.connect_async(store_url) as client:
        for name in RESERVED_NAMES:
            with pytest.raises(InvalidArgument, match="for their own locks") as refused:
                client.lock(name, ttl=5)
            assert "\n" not in str(refused.value) and repr(name) in str(refused.value)
        for near in ("semaphore", "semaphores/x", "my-rwlock/x", "once", "partitions-x"):
            async with client.lock(near, ttl=5) as lease:  # only the prefixes themselves
                lease.check()
        assert await client.locks() == []


async def test_namespaces_do_not_see_each_other(store_url: str) -> None:
    other = sibling(store_url)
    assert other != store_url
    async with (
        tenure.connect_async(store_url) as a,
        tenure.connect_async(other) as b,
        a.lock("shared", ttl=10) as mine,
        b.lock("shared", ttl=10) as theirs,  # same name, other namespace: not blocked
    ):
        assert [(i.name, i.token) for i in await a.locks()] == [("shared", mine.token)]
        assert [(i.name, i.token) for i in await b.locks()] == [("shared", theirs.token)]


async def test_only_the_holder_can_release_or_proclaim(store_url: str) -> None:
    """The store's calls take the holder's session and token: another session that names the
    lock, even with the right token, changes nothing."""
    mine, theirs = open_store(store_url), open_store(store_url)
    try:
        owner = Holder("host", 1, "holder")
        holder = await mine.open_session(10, owner)
        stranger = await theirs.open_session(10, Holder("host", 2, "stranger"))
        grant = await mine.attempt(holder, "guarded", None, enqueue=False)
        assert isinstance(grant, Grant)
        await theirs.release(stranger, "guarded", grant.token)
        await theirs.release(stranger, "guarded", grant.token + 1)
        assert not await theirs.proclaim(stranger, "guarded", grant.token, "forged")
        [info] = await theirs.locks("guarded")
        assert (info.token, info.holder.label, info.value) == (grant.token, "holder", None)
        await mine.release(holder, "guarded", grant.token - 1)  # a stale token of the holder
        assert [i.token for i in await theirs.locks("guarded")] == [grant.token]
        await mine.release(holder, "guarded", grant.token)
        assert await theirs.locks("guarded") == []
        await mine.close_session(holder)
        await theirs.close_session(stranger)
    finally:
        await mine.aclose()
        await theirs.aclose()


@pytest.mark.offers("records")
async def test_job_names_that_look_like_paths_keep_separate_histories(store_url: str) -> None:
    jobs = ["a", "a/b", "a%2Fb", "../a", "a*"]
    async with tenure.connect_async(store_url) as client:
        for index, job in enumerate(jobs):
            claim = await client.once(job, "s1", ttl=10).acquire()
            await claim.complete(index)
        for index, job in enumerate(jobs):
            [slot] = await client.history(job)
            assert (slot.job, slot.slot, slot.exit_code) == (job, "s1", index)
