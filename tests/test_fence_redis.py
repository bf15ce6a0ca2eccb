"""tenure.fence.RedisFence and AsyncRedisFence against the shared real Redis server."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.crc import key_slot

import tenure
from tenure._errors import InvalidArgument, StaleToken
from tenure.fence import AsyncRedisFence, RedisFence
from tenure.metrics import Observer, subscribe, unsubscribe
from tenure.stores.redis.server import RedisServer
from tenure.testing import FaultyStore

# -- one fence per test, on keys no other test uses -------------------------------------------


@dataclass
class Space:
    """A fresh key prefix for the fence's token keys and a fresh resource for the data keys."""

    prefix: str
    resource: str

    def data(self, name: str = "data") -> str:
        return f"{{{self.resource}}}:{name}"  # the resource's hash tag: the token key's slot


@pytest.fixture
def space() -> Space:
    unique = uuid.uuid4().hex
    return Space(f"t_{unique}:fence:", f"orders-{unique}")


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    with redis.Redis.from_url(redis_server.url) as conn:
        yield conn


@pytest.fixture
def fence(client: redis.Redis, space: Space) -> RedisFence:
    return RedisFence(client, prefix=space.prefix)


# -- the three write kinds, seen the same way ------------------------------------------------


@dataclass
class Kind:
    """One fenced write kind: how to write the ``n``-th value, and the data key's whole state."""

    name: str
    write: Callable[[RedisFence, Space, int, int], object]
    write_async: Callable[[AsyncRedisFence, Space, int, int], Any]
    state: Callable[[redis.Redis, Space], object]


KINDS = [
    Kind(
        "set",
        lambda f, s, token, n: f.set(s.resource, token, s.data(), f"v{n}"),
        lambda f, s, token, n: f.set(s.resource, token, s.data(), f"v{n}"),
        lambda c, s: c.get(s.data()),
    ),
    Kind(
        "hset",
        lambda f, s, token, n: f.hset(s.resource, token, s.data(), {"v": f"v{n}", f"f{n}": n}),
        lambda f, s, token, n: f.hset(s.resource, token, s.data(), {"v": f"v{n}", f"f{n}": n}),
        lambda c, s: c.hgetall(s.data()),
    ),
    Kind(
        "xadd",
        lambda f, s, token, n: f.xadd(s.resource, token, s.data(), {"v": f"v{n}"}),
        lambda f, s, token, n: f.xadd(s.resource, token, s.data(), {"v": f"v{n}"}),
        lambda c, s: [fields for _, fields in c.xrange(s.data())],
    ),
]


@pytest.fixture(params=KINDS, ids=[kind.name for kind in KINDS])
def kind(request: pytest.FixtureRequest) -> Kind:
    return request.param  # type: ignore[no-any-return]


def test_first_token_is_admitted_kept_and_written(
    fence: RedisFence, client: redis.Redis, space: Space, kind: Kind
) -> None:
    assert fence.highest(space.resource) is None
    kind.write(fence, space, 7, 1)
    assert fence.highest(space.resource) == 7
    assert client.get(fence.key(space.resource)) == b"7"
    assert kind.state(client, space)


def test_equal_token_is_admitted(
    fence: RedisFence, client: redis.Redis, space: Space, kind: Kind
) -> None:
    kind.write(fence, space, 7, 1)
    first = kind.state(client, space)
    kind.write(fence, space, 7, 2)
    assert kind.state(client, space) != first
    assert fence.highest(space.resource) == 7


def test_higher_token_is_admitted_and_kept(
    fence: RedisFence, client: redis.Redis, space: Space, kind: Kind
) -> None:
    kind.write(fence, space, 7, 1)
    first = kind.state(client, space)
    kind.write(fence, space, 12, 2)
    assert kind.state(client, space) != first
    assert fence.highest(space.resource) == 12


def test_lower_token_is_refused_and_writes_nothing(
    fence: RedisFence, client: redis.Redis, space: Space, kind: Kind
) -> None:
    kind.write(fence, space, 12, 1)
    before = kind.state(client, space)
    with pytest.raises(StaleToken) as refused:
        kind.write(fence, space, 7, 2)
    assert (refused.value.token, refused.value.highest) == (7, 12)
    assert refused.value.resource == space.resource
    assert kind.state(client, space) == before
    assert fence.highest(space.resource) == 12


def test_return_values_are_the_commands(
    fence: RedisFence, client: redis.Redis, space: Space
) -> None:
    assert fence.hset(space.resource, 1, space.data(), {"a": 1, "b": 2}) == 2
    assert fence.hset(space.resource, 1, space.data(), {"a": 3, "c": 4}) == 1  # one new field
    entry = fence.xadd(space.resource, 1, space.data("log"), {"e": "x"}, id="5-1")
    assert entry == "5-1"
    assert client.xrange(space.data("log")) == [(b"5-1", {b"e": b"x"})]


def test_admit_alone_raises_the_token_and_shuts_out_older_writes(
    fence: RedisFence, client: redis.Redis, space: Space, kind: Kind
) -> None:
    kind.write(fence, space, 3, 1)
    before = kind.state(client, space)
    fence.admit(space.resource, 4)  # a newer holder reads
    fence.admit(space.resource, 4)  # and reads again
    assert fence.highest(space.resource) == 4
    with pytest.raises(StaleToken):
        kind.write(fence, space, 3, 2)  # the older holder's late write
    with pytest.raises(StaleToken):
        fence.admit(space.resource, 3)
    assert kind.state(client, space) == before


@pytest.mark.parametrize(
    ("kept", "late"),
    [(10, 9), (100, 99), (2**63 - 1, 2**63 - 2), (2**53 + 1, 2**53)],
    ids=["more-digits", "more-digits-2", "largest", "beyond-doubles"],
)
def test_tokens_compare_as_integers_not_strings_or_doubles(
    fence: RedisFence, space: Space, kept: int, late: int
) -> None:
    fence.admit(space.resource, late)
    fence.admit(space.resource, kept)
    assert fence.highest(space.resource) == kept
    with pytest.raises(StaleToken) as refused:
        fence.set(space.resource, late, space.data(), "late")
    assert refused.value.highest == kept


def test_resources_are_independent(fence: RedisFence, space: Space) -> None:
    fence.admit(space.resource, 9)
    fence.admit(f"{space.resource}-other", 2)
    assert fence.highest(f"{space.resource}-other") == 2


def test_a_client_that_decodes_replies(redis_server: RedisServer, space: Space) -> None:
    with redis.Redis.from_url(redis_server.url, decode_responses=True) as conn:
        fence = RedisFence(conn, prefix=space.prefix)
        assert fence.xadd(space.resource, 5, space.data(), {"a": "b"}, id="1-1") == "1-1"
        with pytest.raises(StaleToken) as refused:
            fence.set(space.resource, 4, space.data("x"), "late")
        assert refused.value.highest == 5
        assert fence.highest(space.resource) == 5


def test_scripts_are_loaded_again_after_a_script_flush(
    fence: RedisFence, client: redis.Redis, space: Space
) -> None:
    fence.set(space.resource, 1, space.data(), "a")
    client.script_flush()  # EVALSHA now answers NOSCRIPT: redis-py loads the script again
    fence.set(space.resource, 2, space.data(), "b")
    assert client.get(space.data()) == b"b"


def test_the_token_key_shares_the_data_keys_hash_slot(fence: RedisFence, space: Space) -> None:
    assert fence.key(space.resource) == f"{space.prefix}{{{space.resource}}}"
    assert key_slot(fence.key(space.resource).encode()) == key_slot(space.data().encode())
    assert key_slot(fence.key("a}b").encode()) == key_slot(b"{a}b}:data")  # the first {...}


def test_a_refusal_is_told_to_observers(fence: RedisFence, space: Space) -> None:
    seen: list[tuple[str, str]] = []

    class Refusals(Observer):
        def fence_refused(self, fence: str, resource: str) -> None:
            seen.append((fence, resource))

    observer = Refusals()
    subscribe(observer)
    try:
        fence.admit(space.resource, 2)
        with pytest.raises(StaleToken):
            fence.admit(space.resource, 1)
    finally:
        unsubscribe(observer)
    assert seen == [("RedisFence", space.resource)]


# -- bad input: one line, nothing written ----------------------------------------------------


@pytest.mark.parametrize("token", [-1, 2**63, "5", 1.0, True, None])
def test_bad_token_is_invalid_argument(
    fence: RedisFence, client: redis.Redis, space: Space, token: Any
) -> None:
    with pytest.raises(InvalidArgument, match="fencing token must be an integer") as bad:
        fence.set(space.resource, token, space.data(), "x")
    assert "\n" not in str(bad.value)
    assert client.exists(fence.key(space.resource), space.data()) == 0


@pytest.mark.parametrize("resource", ["", 3, "a\x00b", None])
def test_bad_resource_is_invalid_argument(fence: RedisFence, space: Space, resource: Any) -> None:
    with pytest.raises(InvalidArgument, match="fence resource must be"):
        fence.admit(resource, 1)


@pytest.mark.parametrize(
    "call",
    [
        lambda f, s: f.hset(s.resource, 1, s.data(), {}),
        lambda f, s: f.xadd(s.resource, 1, s.data(), {}),
        lambda f, s: f.xadd(s.resource, 1, s.data(), {"a": 1}, id=""),
        lambda f, s: f.set(s.resource, 1, "", "x"),
        lambda f, s: f.set(s.resource, 1, 5, "x"),
    ],
    ids=["hset-nothing", "xadd-nothing", "xadd-no-id", "empty-key", "int-key"],
)
def test_bad_write_is_invalid_argument_and_keeps_no_token(
    fence: RedisFence, client: redis.Redis, space: Space, call: Callable[..., object]
) -> None:
    with pytest.raises(InvalidArgument):
        call(fence, space)
    assert client.exists(fence.key(space.resource)) == 0


@pytest.mark.parametrize("prefix", ["app:{x}:", 5])
def test_bad_prefix_is_invalid_argument(client: redis.Redis, prefix: Any) -> None:
    with pytest.raises(InvalidArgument, match="prefix"):
        RedisFence(client, prefix=prefix)


# -- a hand-over between two real lock holders -----------------------------------------------


def test_the_former_holders_late_write_is_refused_after_a_hand_over(
    fence: RedisFence, client: redis.Redis, space: Space, sqlite_store_url: str
) -> None:
    paused = FaultyStore.from_url(sqlite_store_url)
    with (
        tenure.Client(paused) as a_client,
        tenure.connect(sqlite_store_url) as b_client,
        pytest.raises(tenure.LeaseLost),
        a_client.lock("job", ttl=1) as a,
    ):
        fence.set(space.resource, a.token, space.data(), "from A")
        paused.hang_keep_alive = True  # A stops renewing, as if paused; its lease runs out
        with b_client.lock("job", ttl=30, timeout=60) as b:  # granted once A's expired
            assert b.token > a.token
            fence.admit(space.resource, b.token)  # B reads the data
            seen = client.get(space.data())
            with pytest.raises(StaleToken) as refused:  # A wakes and writes late
                fence.set(space.resource, a.token, space.data(), "late, from A")
            assert (refused.value.token, refused.value.highest) == (a.token, b.token)
            assert client.get(space.data()) == seen == b"from A"
            fence.set(space.resource, b.token, space.data(), "from B")
        paused.hang_keep_alive = False
    assert client.get(space.data()) == b"from B"


# -- async -----------------------------------------------------------------------------------


def run_async(redis_server: RedisServer, space: Space, body: Callable[..., Any]) -> None:
    async def main() -> None:
        conn = redis.asyncio.Redis.from_url(redis_server.url)
        try:
            await body(AsyncRedisFence(conn, prefix=space.prefix), conn)
        finally:
            await conn.aclose()

    asyncio.run(main())


def test_async_equal_higher_and_lower_tokens(
    redis_server: RedisServer, client: redis.Redis, space: Space, kind: Kind
) -> None:
    async def body(fence: AsyncRedisFence, conn: redis.asyncio.Redis) -> None:
        await kind.write_async(fence, space, 7, 1)
        first = kind.state(client, space)
        await kind.write_async(fence, space, 7, 2)  # equal
        second = kind.state(client, space)
        assert second != first
        await kind.write_async(fence, space, 9, 3)  # higher
        third = kind.state(client, space)
        assert third != second
        assert await fence.highest(space.resource) == 9
        with pytest.raises(StaleToken) as refused:  # lower
            await kind.write_async(fence, space, 8, 4)
        assert (refused.value.token, refused.value.highest) == (8, 9)
        assert kind.state(client, space) == third
        await fence.admit(space.resource, 10)
        with pytest.raises(StaleToken):
            await fence.admit(space.resource, 9)
        assert await fence.highest(space.resource) == 10

    run_async(redis_server, space, body)


def test_async_bad_input_is_invalid_argument(redis_server: RedisServer, space: Space) -> None:
    async def body(fence: AsyncRedisFence, conn: redis.asyncio.Redis) -> None:
        with pytest.raises(InvalidArgument):
            await fence.set(space.resource, -1, space.data(), "x")
        with pytest.raises(InvalidArgument):
            await fence.hset("", 1, space.data(), {"a": 1})
        assert await conn.exists(space.data()) == 0

    run_async(redis_server, space, body)


def test_async_hand_over_refuses_the_former_holders_late_write(
    redis_server: RedisServer, client: redis.Redis, space: Space, sqlite_store_url: str
) -> None:
    async def body(fence: AsyncRedisFence, conn: redis.asyncio.Redis) -> None:
        paused = FaultyStore.from_url(sqlite_store_url)
        async with tenure.AsyncClient(paused) as a_client:
            with pytest.raises(tenure.LeaseLost):
                async with a_client.lock("job", ttl=1) as a:
                    await fence.xadd(space.resource, a.token, space.data(), {"by": "A"})
                    paused.hang_keep_alive = True  # A stops renewing, as if paused
                    await asyncio.sleep(3600)  # cancelled when A's lease is lost
            paused.hang_keep_alive = False
        async with (
            tenure.connect_async(sqlite_store_url) as b_client,
            b_client.lock("job", ttl=30, timeout=60) as b,
        ):
            assert b.token > a.token
            await fence.xadd(space.resource, b.token, space.data(), {"by": "B"})
        with pytest.raises(StaleToken):  # A, still holding its token, writes late
            await fence.xadd(space.resource, a.token, space.data(), {"by": "A, late"})

    run_async(redis_server, space, body)
    entries = [fields for _, fields in client.xrange(space.data())]
    assert entries == [{b"by": b"A"}, {b"by": b"B"}]


def test_tenure_fence_imports_without_redis_py() -> None:
    code = (
        "import sys; sys.modules['redis'] = None\n"  # import redis now raises ImportError
        "import tenure.fence\n"
        "print(tenure.fence.RedisFence.__name__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "RedisFence\n"


def test_the_example_refuses_the_late_write(redis_server: RedisServer) -> None:
    example = Path(__file__).parents[1] / "examples" / "fence_redis.py"
    done = subprocess.run(
        [sys.executable, str(example), redis_server.url],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "TENURE_STORE"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "holder 1 (token 1) wrote: packed",
        "holder 2 (token 2) read: packed",
        "holder 2 (token 2) wrote: shipped",
        "holder 1's late write refused: stale fencing token 1 for 'orders': 2 was already accepted",
        "state: shipped, log entries: 1",
    ]


def test_the_docs_page_shows_the_example_as_it_is() -> None:
    root = Path(__file__).parents[1]
    page = (root / "docs" / "fencing-redis.md").read_text()
    code = page.split("```python\n", 1)[1].split("```", 1)[0]
    assert code in (root / "examples" / "fence_redis.py").read_text()
