"""The store kit: the owner codec, the one-line error, requests in doubt, the URL skeleton."""

from __future__ import annotations

import pytest

from tenure import Holder, InvalidArgument, StoreUnavailable
from tenure.stores._connect import NO_OPTIONS
from tenure.stores._kit import (
    FOREIGN,
    Backoff,
    InDoubt,
    Unavailable,
    owner_json,
    parse_owner,
    parse_url,
    patience,
)


def test_the_owner_round_trips_with_the_stores_own_fields() -> None:
    owner, fields = parse_owner(owner_json(Holder("h", 7, "job"), ttl=3.5))
    assert owner == Holder("h", 7, "job") and fields["ttl"] == 3.5
    assert parse_owner(b'{"host": "h"}') == (FOREIGN, {})
    assert parse_owner(None) == (FOREIGN, {})
    assert parse_owner(b"\xff not json") == (FOREIGN, {})


def test_a_drivers_error_becomes_one_line_without_secrets() -> None:
    unavailable = Unavailable("redis at h:1", secrets=["hunter2"], timeout=2.0)
    with pytest.raises(StoreUnavailable) as caught, unavailable.on(OSError):
        raise OSError("auth hunter2 failed\n  at line 3")
    assert str(caught.value) == "redis at h:1: auth *** failed at line 3"
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert str(unavailable.of(TimeoutError())) == "redis at h:1: no answer within 2s"
    with pytest.raises(KeyError), unavailable.on(OSError):
        raise KeyError("not the driver's: passes through")


@pytest.mark.anyio
async def test_requests_in_doubt_stay_until_the_store_answers() -> None:
    doubt: InDoubt[str] = InDoubt()
    for item in ("a", "b", "c"):
        doubt.add(item)
    done: list[str] = []

    async def redo(item: str) -> None:
        if item == "b":
            raise StoreUnavailable("still away")
        done.append(item)

    await doubt.sweep(redo, within=1.0)
    assert done == ["a"] and list(doubt) == ["b", "c"]  # stops at the first failure
    await doubt.sweep(lambda item: _noop(), within=1.0)
    assert len(doubt) == 0


async def _noop() -> None:
    return None


def test_the_url_skeleton_refuses_in_one_redacted_line() -> None:
    with pytest.raises(InvalidArgument) as caught:
        parse_url("etcd://u:secret@h#frag", ("etcd",), "etcd", "etcd://host")
    assert str(caught.value) == (
        "bad etcd store URL 'etcd://u:***@h#frag': no fragment allowed (use etcd://host)"
    )
    url = parse_url("etcd://h1,h2:9?x=1", ("etcd",), "etcd", "etcd://host")
    assert url.hosts(2379) == [("h1", 2379), ("h2", 9)]
    url.resolve(NO_OPTIONS)
    with pytest.raises(InvalidArgument, match="unknown option 'x'"):
        url.only("prefix")


def test_patience_and_backoff_stay_in_bounds() -> None:
    assert patience(0.4) == 0.25 and patience(8) == 2.0 and patience(600) == 5.0
    backoff = Backoff(first=0.01, most=0.04)
    delays = [backoff.delay() for _ in range(6)]
    assert all(0.005 <= d <= 0.04 for d in delays) and delays[-1] >= 0.02


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_an_etcd_client_passes_over_members_that_failed_lately() -> None:
    from tenure.stores.etcd.transport import SHUNNED, next_member

    now = 100.0
    assert next_member(0, {0: now}, now, 3) == 1
    assert next_member(0, {0: now, 1: now - 1}, now, 3) == 2  # 1 failed a second ago
    assert next_member(2, {2: now, 0: now - 1}, now, 3) == 1  # round the list
    assert next_member(0, {0: now, 1: now - SHUNNED - 1}, now, 3) == 1  # long enough ago
    assert next_member(0, dict.fromkeys(range(3), now), now, 3) == 1  # all failed: the next
    assert next_member(0, {0: now}, now, 1) == 0
