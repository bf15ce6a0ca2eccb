"""The etcd store, spoken over etcd's gRPC API (grpcio), or its JSON gateway (httpx).

``transport`` is what both transports share (members, fail-over, TLS, auth tokens),
``grpc_transport`` and ``gateway`` the two wires (``proto``: etcd's messages), ``keys`` the key
layout and txn operations, ``session`` the leases, ``watch`` a holder's watch, ``records`` and
``guard`` the records and the write guard, ``store`` the `EtcdStore` itself. The design:
docs/stores/etcd.md.
"""

from .guard import GuardedTxn
from .store import EtcdStore

__all__ = ["EtcdStore", "GuardedTxn"]
