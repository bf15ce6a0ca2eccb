"""``require=``: a caller asking for correctness-grade is refused an efficiency-grade store."""

from __future__ import annotations

from pathlib import Path

import pytest

import tenure


@pytest.mark.parametrize("url", ["redis://127.0.0.1:1/0", "redlock://127.0.0.1:1,127.0.0.1:2"])
def test_correctness_refuses_redis_before_connecting(url: str) -> None:
    with pytest.raises(tenure.InvalidArgument, match="efficiency-grade") as caught:
        tenure.connect(url, require="correctness")
    assert "\n" not in str(caught.value)


def test_correctness_accepts_the_embedded_store(tmp_path: Path) -> None:
    with tenure.connect(f"sqlite:///{tmp_path}/s.db", require="correctness") as client:
        assert client.capabilities.grade == "correctness"
        with client.lock("x", ttl=5) as lease:
            assert lease.token >= 1


def test_efficiency_accepts_both(tmp_path: Path) -> None:
    with tenure.connect(f"sqlite:///{tmp_path}/s.db", require="efficiency") as client:
        assert client.capabilities.grade == "correctness"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_async_connect_refuses_too() -> None:
    with pytest.raises(tenure.InvalidArgument, match="efficiency-grade"):
        async with tenure.connect_async("redis://127.0.0.1:1/0", require="correctness"):
            pass


def test_unknown_grade_is_refused(tmp_path: Path) -> None:
    with pytest.raises(tenure.InvalidArgument, match="require must be one of"):
        tenure.connect(f"sqlite:///{tmp_path}/s.db", require="strict")  # type: ignore[arg-type]
    assert not (tmp_path / "s.db").exists()  # refused before the file was created


def test_a_capability_can_be_required_before_connecting() -> None:
    with pytest.raises(tenure.InvalidArgument, match="does not offer records") as caught:
        tenure.connect("redlock://127.0.0.1:1,127.0.0.1:2", require=("efficiency", "records"))
    assert "\n" not in str(caught.value)


def test_what_a_store_offers_is_derived_from_what_it_implements(tmp_path: Path) -> None:
    from tenure.stores._spi import Records, offers
    from tenure.stores.redis import RedlockStore

    assert offers(RedlockStore) == {"elections": True, "records": False, "revoke": False}
    assert not issubclass(RedlockStore, Records)
    with tenure.connect(f"sqlite:///{tmp_path}/s.db", require=["records", "elections"]) as c:
        assert c.capabilities.records and c.capabilities.elections
    with tenure.connect(f"sqlite:///{tmp_path}/s.db", require="revoke") as c:
        assert c.capabilities.revoke


def test_a_store_that_cannot_revoke_is_refused_in_one_line() -> None:
    with pytest.raises(tenure.InvalidArgument, match="does not offer revoke") as caught:
        tenure.connect("redlock://127.0.0.1:1,127.0.0.1:2", require="revoke")
    assert "\n" not in str(caught.value)
