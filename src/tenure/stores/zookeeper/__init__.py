"""The ZooKeeper store: ``zookeeper://[user:password@]host:port[,host:port…][/chroot]``
(default chroot ``/tenure``), with ``?tls=true``, ``ca``, ``cert``, ``key``, over kazoo.

- `transport`: the kazoo client, its TLS handler and digest identity, kazoo's internals;
- `connections`: the shared reader and each session's requests, their errors, the ACL check;
- `nodes`: paths and node data; `session`: sessions and tickets; `watch`: `ZooKeeperWatch`;
- `store`: the contract's calls; `holdback`: lock-delay's marker; `records`: ``tenure once``.

How it works and why: docs/stores/zookeeper.md.
"""

from .store import DEFAULT_CHROOT, DEFAULT_PORT, ZooKeeperStore

__all__ = ["DEFAULT_CHROOT", "DEFAULT_PORT", "ZooKeeperStore"]
