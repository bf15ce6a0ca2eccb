"""ZooKeeper fixtures: one real 3-server ensemble for the whole test session, a fresh chroot per
test.

Loaded by ``tests/conftest.py``; the conformance suite then runs on ``zookeeper_store_url`` too.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tenure.stores._server import ram_disk
from tenure.stores.zookeeper.server import ZooKeeperEnsemble


@pytest.fixture(scope="session")
def zookeeper_ensemble() -> Iterator[ZooKeeperEnsemble]:
    """Shared by all tests: a test that stops, kills or pauses servers must leave them running
    (``zookeeper_ensemble.healthy()`` in a ``finally``)."""
    missing = ZooKeeperEnsemble.missing()
    if missing:
        pytest.skip(f"ZooKeeper not available (missing {', '.join(missing)})")
    ensemble = ZooKeeperEnsemble(servers=3, data_root=ram_disk())
    try:
        ensemble.start()
        yield ensemble
    finally:
        ensemble.close()


@pytest.fixture
def zookeeper_store_url(zookeeper_ensemble: ZooKeeperEnsemble) -> str:
    """All servers' endpoints and a fresh chroot for this test."""
    return f"zookeeper://{','.join(zookeeper_ensemble.endpoints)}/t_{uuid.uuid4().hex}"
