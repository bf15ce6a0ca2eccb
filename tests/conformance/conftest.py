"""The conformance suite runs every test here against every store.

A store joins by its entry in ``tenure.stores._registry`` and a ``<key>_store_url`` fixture (in
``tests/plugin_<store>.py``, loaded by ``tests/conftest.py``): a URL to a fresh, empty namespace
on a real server started once per session by that store's shared fixture.
"""

from __future__ import annotations

import pytest

from tenure.stores._registry import REGISTRY

STORES = [entry.key for entry in REGISTRY]


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest) -> str:
    url = request.getfixturevalue(f"{request.param}_store_url")
    assert isinstance(url, str)
    return url


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
