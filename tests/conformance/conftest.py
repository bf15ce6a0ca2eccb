"""The conformance suite runs every test here against every store.

A store joins by adding a parameter to ``store_url``: a URL to a fresh, empty namespace on a real
server started by a shared fixture.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(params=["sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/store.db"
    raise AssertionError(request.param)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
