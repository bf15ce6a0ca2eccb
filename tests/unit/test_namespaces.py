"""Namespaces of tree-shaped stores (etcd keys, ZooKeeper nodes) cannot overlap: a namespace
with a segment of tenure's own (``locks``, ``records``) would fall inside another's keys."""

from __future__ import annotations

import pytest

from tenure import InvalidArgument
from tenure.stores.etcd import EtcdStore
from tenure.stores.zookeeper import ZooKeeperStore

STORES = [
    (EtcdStore, "etcd://h1:2379/", "namespace"),
    (ZooKeeperStore, "zookeeper://h1:2181/", "chroot"),
]


@pytest.mark.parametrize(("store", "base", "field"), STORES)
@pytest.mark.parametrize("path", ["app/locks", "locks", "a/records/b", "records"])
def test_a_namespace_cannot_reach_into_another(
    store: type[EtcdStore | ZooKeeperStore], base: str, field: str, path: str
) -> None:
    # "app/locks" keys would be "app/locks/locks/…": inside namespace "app"'s lock "locks".
    with pytest.raises(InvalidArgument, match=r"is tenure's own .*inside another namespace"):
        store.from_url(base + path)


@pytest.mark.parametrize(("store", "base", "field"), STORES)
@pytest.mark.parametrize("path", ["app/lockss", "mylocks", "records2/x", "a/b"])
def test_namespaces_that_only_look_alike_are_fine(
    store: type[EtcdStore | ZooKeeperStore], base: str, field: str, path: str
) -> None:
    assert getattr(store.from_url(base + path), field).strip("/") == path
