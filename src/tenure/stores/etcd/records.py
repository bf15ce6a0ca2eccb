"""Records (``tenure once``): plain keys ``<namespace>/records/<key>``, on no lease."""

from __future__ import annotations

from .._spi import Record
from .keys import (
    created_at,
    delete_op,
    get_op,
    modded_at,
    prefix_end,
    put_op,
    range_op,
    unb64,
)
from .transport import JSON, Call


class RecordKeys:
    """The records under ``prefix`` (a namespace's ``…/records/``). A key is its UTF-8 bytes,
    not encoded, so etcd's byte order is the key order; the version is its mod revision."""

    def __init__(self, prefix: bytes, call: Call) -> None:
        """``call``: the store's request, its refusals translated."""
        self._prefix = prefix
        self._call = call

    def _of(self, kv: JSON) -> Record:
        key = unb64(kv["key"])[len(self._prefix) :].decode()
        return Record(key, unb64(kv.get("value")).decode(), int(kv["mod_revision"]))

    async def read(self, key: str) -> Record | None:
        answer = await self._call("kv/range", get_op(self._prefix + key.encode())["request_range"])
        kvs = answer.get("kvs") or []
        return self._of(kvs[0]) if kvs else None

    async def write(self, key: str, value: str, version: int) -> Record | None:
        if version < 0:
            return None  # never a record's version
        full = self._prefix + key.encode()
        compare = created_at(full, 0) if version == 0 else modded_at(full, version)
        body = {"compare": [compare], "success": [put_op(full, value)], "failure": []}
        # Not sent again once it may have applied: a second try would find its own write and be
        # refused, telling the caller that someone else wrote.
        answer = await self._call("kv/txn", body, retry=False)
        if not answer.get("succeeded"):
            return None
        # The txn's revision is its put's: the record's new mod revision.
        return Record(key, value, int(answer["header"]["revision"]))

    def op(self, key: str, value: str | None) -> JSON:
        """The put of record ``key`` (None: its delete), for a transaction of the caller's."""
        full = self._prefix + key.encode()
        return delete_op(full) if value is None else put_op(full, value)

    async def list(self, prefix: str) -> list[Record]:
        start = self._prefix + prefix.encode()
        # Everything from ``start`` up to its prefix end starts with it: no key beyond.
        op = range_op(start, prefix_end(start), sort_order="ASCEND", sort_target="KEY")
        answer = await self._call("kv/range", op["request_range"])
        return [self._of(kv) for kv in answer.get("kvs") or []]
