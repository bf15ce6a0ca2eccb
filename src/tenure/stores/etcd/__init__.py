"""The etcd store, spoken over etcd's JSON gateway with httpx: no protobuf, no gRPC stubs.

``gateway`` is the transport (members, fail-over, TLS, auth tokens), ``keys`` the key layout
and txn operations, ``session`` the leases, ``watch`` a holder's watch, ``records`` and
``guard`` the records and the write guard, ``store`` the `EtcdStore` itself. The design:
docs/stores/etcd.md.
"""

from .guard import GuardedTxn
from .store import EtcdStore

__all__ = ["EtcdStore", "GuardedTxn"]
