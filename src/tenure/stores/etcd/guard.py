"""The write guard: a caller's own etcd txn, applied only while a token still holds a lock."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .keys import b64, prefix_end, range_op
from .transport import JSON, Call


@dataclass(frozen=True)
class GuardedTxn:
    """What ``guarded_txn`` did: ``held`` is True if the lock (and any own compare) held and
    the ``success`` operations applied; otherwise ``failure`` applied."""

    held: bool
    revision: int
    responses: list[JSON]


async def guarded_txn(
    call: Call,
    prefix: bytes,
    token: int,
    success: Sequence[JSON],
    failure: Sequence[JSON],
    compare: Sequence[JSON],
) -> GuardedTxn:
    """``success`` in one txn whose compare is the lock key's create revision (the key under
    the lock's ``prefix`` created at ``token``), as etcd's ``Mutex.IsOwner()``; else
    ``failure``. ``call``: the store's request, refusals translated."""
    lookup = range_op(
        prefix,
        prefix_end(prefix),
        keys_only=True,
        min_create_revision=str(token),
        max_create_revision=str(token),
    )
    kvs = (await call("kv/range", lookup["request_range"])).get("kvs", [])
    # No live key created at ``token``: compare on the bare prefix (never a key), which fails,
    # so ``failure`` applies just as when the lock was lost between the two requests.
    key = kvs[0]["key"] if kvs else b64(prefix)
    guard = {"key": key, "target": "CREATE", "result": "EQUAL"}
    body = {
        "compare": [{**guard, "create_revision": str(token)}, *compare],
        "success": list(success),
        "failure": list(failure),
    }
    # Never sent again once it may have applied: it is not idempotent in general.
    answer = await call("kv/txn", body, retry=False)
    return GuardedTxn(
        held=bool(answer.get("succeeded")),
        revision=int(answer["header"]["revision"]),
        responses=list(answer.get("responses", [])),
    )
