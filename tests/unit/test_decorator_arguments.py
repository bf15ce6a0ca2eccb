"""The decorators refuse what cannot work with one line, when decorating where they can (the
kind of function, the name, the TTL, the slot's type) and at the call for a slot key."""

from __future__ import annotations

from pathlib import Path

import pytest

import tenure
from tenure import InvalidArgument
from tenure._url import open_store


def test_each_client_decorates_its_own_kind_of_function(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"

    async def coroutine() -> None: ...

    def plain() -> None: ...

    with tenure.connect(url) as client:
        with pytest.raises(InvalidArgument, match="coroutine function: decorate it with the async"):
            client.lock("job")(coroutine)
        with pytest.raises(InvalidArgument, match="coroutine function"):
            client.once("job", "s")(coroutine)
        with pytest.raises(InvalidArgument, match="decorates a function"):
            client.lock("job")(42)  # type: ignore[arg-type]
    async_client = tenure.AsyncClient(open_store(url))
    with pytest.raises(InvalidArgument, match="not a coroutine function: decorate it with"):
        async_client.lock("job")(plain)  # type: ignore[arg-type]


def test_bad_names_ttls_and_slots_are_refused(tmp_path: Path) -> None:
    with tenure.connect(f"sqlite:///{tmp_path}/t.db") as client:
        with pytest.raises(InvalidArgument):
            client.lock("")
        with pytest.raises(InvalidArgument):
            client.lock("job", ttl=-1)
        with pytest.raises(InvalidArgument, match="slot must be a key or a function"):
            client.once("job", 7)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="policy"):
            client.once("job", "s", policy="twice")  # type: ignore[arg-type]

        @client.once("job", lambda: " padded ")
        def job() -> None: ...

        with pytest.raises(InvalidArgument, match="slot key"):
            job()  # the key comes at the call: refused then, nothing claimed
        assert client.locks() == [] and client.history("job") == []
