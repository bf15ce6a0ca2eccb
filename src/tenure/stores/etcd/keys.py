"""Where tenure keeps things in etcd (`Keys`), and the txn operations and compares over those
keys in etcd's JSON (bytes as base64, int64s as strings). No I/O.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from .._kit import parse_owner, parse_revocation, revocation_json
from .._spi import LockInfo, Revocation
from .transport import JSON


def b64(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode("ascii")


def unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def prefix_end(prefix: bytes) -> bytes:
    """The end of the key range of everything starting with ``prefix`` (etcd's convention)."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


REVOKED = "%revoked"
"""The first segment under the locks root of the revocation keys: no lock's (see `Keys`)."""


@dataclass(frozen=True)
class Keys:
    """The keys of one namespace: ``<namespace>/locks/<percent-encoded name>/<lease id hex>``
    queue for a lock, ``<namespace>/locks/<encoded name>`` is its hold-back key, and
    ``<namespace>/records/<key>`` holds a record."""

    namespace: str
    root: bytes = field(init=False)
    """``<namespace>/locks/``: every lock's queue and hold-back key starts with it."""
    records: bytes = field(init=False)
    """``<namespace>/records/``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", self.namespace.encode() + b"/locks/")
        object.__setattr__(self, "records", self.namespace.encode() + b"/records/")

    def prefix(self, name: str) -> bytes:
        """The prefix of lock ``name``'s queue (it ends with ``/``: ``a/b`` is not in ``a``'s)."""
        return self.root + quote(name, safe="").encode() + b"/"

    def held(self, name: str) -> bytes:
        """The hold-back key of ``name``: the lock's prefix without its ``/``, so in no lock's
        range (an encoded name has no ``/``)."""
        return self.root + quote(name, safe="").encode()

    @staticmethod
    def queued(prefix: bytes, lease: int, slot: int) -> bytes:
        """The key a session (its ``lease``) queues with under ``prefix``, in key ``slot``."""
        return prefix + f"{lease:016x}{f'.{slot}' if slot else ''}".encode()

    def revoked(self, lease: int, name: str = "") -> bytes:
        """The key telling the session of ``lease`` that its grant of ``name`` was revoked
        (no ``name``: the prefix of all of them)."""
        return self.root + f"{REVOKED}/{lease:016x}/".encode() + quote(name, safe="").encode()

    def name_of(self, key: bytes) -> str:
        """The lock name of a queue key or hold-back key."""
        return unquote(key[len(self.root) :].split(b"/", 1)[0].decode())

    def record(self, key: str) -> bytes:
        return self.records + key.encode()


# -- operations ------------------------------------------------------------------------------


def put_op(key: bytes | str, value: bytes | str, lease: int = 0) -> JSON:
    """A put for ``guarded_txn`` (``lease`` 0: not attached to a lease)."""
    op: JSON = {"key": b64(key), "value": b64(value)}
    if lease:
        op["lease"] = str(lease)
    return {"request_put": op}


def delete_op(key: bytes | str) -> JSON:
    return {"request_delete_range": {"key": b64(key)}}


def get_op(key: bytes | str) -> JSON:
    return {"request_range": {"key": b64(key)}}


def range_op(key: bytes, end: bytes, **options: Any) -> JSON:
    return {"request_range": {"key": b64(key), "range_end": b64(end), **options}}


def first_op(prefix: bytes, end: bytes) -> JSON:
    """A read of the key created first in the range: a lock's holder."""
    return range_op(prefix, end, limit="1", sort_order="ASCEND", sort_target="CREATE")


def last_op(prefix: bytes, end: bytes, limit: int, below: int = 0) -> JSON:
    """A read of the ``limit`` keys created last in the range (created at ``below`` or
    earlier, if given): a queued key's predecessor."""
    more = {"max_create_revision": str(below)} if below else {}
    return range_op(
        prefix, end, limit=str(limit), sort_order="DESCEND", sort_target="CREATE", **more
    )


def absent(key: JSON) -> JSON:
    """A compare: no key (in the range, if ``key`` has a ``range_end``)."""
    return {**key, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}


def created_at(key: bytes, revision: int) -> JSON:
    """A compare: ``key`` was created at ``revision`` (0: there is no ``key``)."""
    return {
        "key": b64(key),
        "target": "CREATE",
        "result": "EQUAL",
        "create_revision": str(revision),
    }


def oldest(prefix: bytes, end: bytes, revision: int) -> JSON:
    """A compare: no key in ``[prefix, end)`` was created before ``revision`` (a range compare
    holds for every key in the range)."""
    return {
        "key": b64(prefix),
        "range_end": b64(end),
        "target": "CREATE",
        "result": "GREATER",
        "create_revision": str(revision - 1),
    }


def modded_at(key: bytes, revision: int | str) -> JSON:
    """A compare: ``key`` was last written at ``revision`` (0: there is no ``key``)."""
    return {"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(revision)}


def leased_to(key: bytes, lease: int) -> JSON:
    """A compare: ``key`` is attached to ``lease``."""
    return {"key": b64(key), "target": "LEASE", "result": "EQUAL", "lease": str(lease)}


def hold_op(
    key: bytes, lease: int, lock_delay: float, token: int, revoked: Revocation | None = None
) -> JSON:
    """The put of a hold-back key on a session's hold-back ``lease`` (``token`` 0: the put's
    own revision, the lock key's in the same txn), or on a revocation's (``revoked``)."""
    fields: dict[str, object] = {"lock_delay": lock_delay}
    if token:
        fields["token"] = token
    if revoked is not None:
        fields["revoked"] = revocation_json(revoked)
    return {"request_put": {"key": b64(key), "value": b64(json.dumps(fields)), "lease": str(lease)}}


# -- answers ---------------------------------------------------------------------------------


def created(kv: JSON) -> int:
    return int(kv.get("create_revision", 0))


def ranges(answer: JSON) -> list[JSON]:
    """The range responses of a txn answer (an empty dict for any other response)."""
    return [r.get("response_range") or {} for r in answer.get("responses") or [{}]]


def lock_info(name: str, holder: JSON, count: int, expires_in: float) -> LockInfo:
    """The lock held by the key ``holder`` (its value: the owner, and any proclaimed value)."""
    who, fields = parse_owner(unb64(holder.get("value")))
    value = fields.get("value")
    value = value if isinstance(value, str) else None
    return LockInfo(name, created(holder), who, expires_in, max(0, count - 1), value)


def held_revocation(held: JSON) -> Revocation | None:
    """The revocation a hold-back key stands for (put by ``revoke``), or None."""
    try:
        return parse_revocation(json.loads(unb64(held.get("value"))).get("revoked"))
    except (ValueError, TypeError, AttributeError):
        return None


def held_token(held: JSON) -> int:
    """The token of the grant a hold-back key stands for: the one in its value, else (put in
    the grant's own txn) its create revision, which is the lock key's."""
    try:
        return int(json.loads(unb64(held.get("value"))).get("token") or created(held))
    except (ValueError, TypeError, AttributeError):
        return created(held)
