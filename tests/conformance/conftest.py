"""The conformance suite runs every test here against every store that offers what it tests.

A test (or a module, by ``pytestmark``) marked ``@pytest.mark.offers("records")`` runs only on
the stores whose derived capabilities include that; the others skip it, saying why.

A store joins by its entry in the registry (``tenure.stores.entries()``: the built-in stores and
those registered by entry point) and a ``<key>_store_url`` fixture (in ``tests/plugin_<store>.py``,
loaded by ``tests/conftest.py``): a URL to a fresh, empty namespace on a real server started once
per session by that store's shared fixture.
"""

from __future__ import annotations

import pytest

from tenure._url import store_class
from tenure.stores import entries

STORES = [entry.key for entry in entries()]
_SCHEME = {entry.key: entry.schemes[0] for entry in entries()}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "offers(*names): only on stores offering these capabilities")


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest) -> str:
    capabilities = store_class(f"{_SCHEME[request.param]}://").capabilities
    for marker in request.node.iter_markers("offers"):
        for name in marker.args:
            if not getattr(capabilities, name):
                pytest.skip(f"the {request.param} store does not offer {name}")
    url = request.getfixturevalue(f"{request.param}_store_url")
    assert isinstance(url, str)
    return url


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
