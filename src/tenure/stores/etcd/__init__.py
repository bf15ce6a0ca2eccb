"""The etcd store, spoken over etcd's JSON gateway with httpx: no protobuf, no gRPC stubs.

``gateway`` is the transport (members, fail-over, TLS, auth tokens), ``keys`` the key layout
and txn operations, ``session`` the leases, ``watch`` a holder's watch, ``records`` and
``guard`` the records and the write guard, ``store`` the `EtcdStore` itself. The design:
docs/stores/etcd.md.
"""

from .gateway import JSON
from .guard import GuardedTxn
from .keys import b64, delete_op, get_op, prefix_end, put_op, unb64
from .session import EtcdSession, EtcdTicket
from .store import EtcdStore
from .watch import EtcdWatch

__all__ = [
    "JSON", "EtcdSession", "EtcdStore", "EtcdTicket", "EtcdWatch", "GuardedTxn", "b64",
    "delete_op", "get_op", "prefix_end", "put_op", "unb64",
]  # fmt: skip
