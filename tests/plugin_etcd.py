"""etcd fixtures: one real 3-member cluster for the whole test session, a fresh namespace per test.

Loaded by ``tests/conftest.py``; the conformance suite then runs on ``etcd_store_url`` too.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tenure.stores._server import ram_disk
from tenure.stores.etcd.server import ETCD, EtcdCluster


@pytest.fixture(scope="session")
def etcd_cluster() -> Iterator[EtcdCluster]:
    """Shared by all tests: a test that stops, kills or pauses members must leave them running
    (``etcd_cluster.healthy()`` in a ``finally``)."""
    try:
        cluster = EtcdCluster(members=3, data_root=ram_disk())
    except RuntimeError as exc:
        pytest.skip(f"etcd not available ({ETCD}): {exc}")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def etcd_store_url(etcd_cluster: EtcdCluster) -> str:
    """All members' endpoints and a fresh namespace for this test."""
    return f"etcd://{','.join(etcd_cluster.endpoints)}/t_{uuid.uuid4().hex}"
