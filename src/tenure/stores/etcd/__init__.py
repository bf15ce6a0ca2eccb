"""The etcd store (``store``), spoken over etcd's JSON gateway with httpx (``gateway``)."""

from .gateway import JSON, b64, prefix_end, unb64
from .store import EtcdSession, EtcdStore, EtcdTicket, GuardedTxn, delete_op, get_op, put_op

__all__ = [
    "JSON", "EtcdSession", "EtcdStore", "EtcdTicket", "GuardedTxn", "b64", "delete_op",
    "get_op", "prefix_end", "put_op", "unb64",
]  # fmt: skip
