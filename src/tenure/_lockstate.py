"""State that travels with a lock: a small key/value space per lock, fenced by the store itself.

The most common thing a holder writes is small state of its own — a cursor, an offset, a
checkpoint — that the next holder must read. ``lease.state`` keeps it in the store's records,
one space per lock (the lock the store holds for the grant: a leader's election, a partition's
item), and every write commits only while the writer's grant is current, by the store's own
compare in the same transaction (``Records.write_held_record``): a holder that was paused while
the lock moved on has its write refused, and learns that its lease is lost. Reads need no grant.

Keys are printable text of at most 200 bytes; values are text (JSON is the usual choice) of at
most 64 KiB: the store keeps them beside its locks, not as a database.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import quote

from ._errors import InvalidArgument
from ._modes import Async, Blocking, io

if TYPE_CHECKING:
    from ._lease import LeaseBase
    from ._loop_thread import LoopThread
    from .stores._spi import Records

PREFIX = "state:"
"""Where the state spaces are among a store's records (``tenure once``'s keys never contain a
colon before their first slash: their job names are percent-encoded)."""
MAX_KEY_BYTES = 200
MAX_VALUE_BYTES = 64 * 1024


def space_prefix(lock: str) -> str:
    """The record keys of ``lock``'s state space all start with this, and no other's do."""
    return f"{PREFIX}{quote(lock, safe='')}/"


def check_key(key: object) -> str:
    """A state key: printable, no surrounding whitespace, at most 200 bytes."""
    if not isinstance(key, str) or not key:
        raise InvalidArgument(f"state key must be a non-empty string, got {key!r}")
    if not key.isprintable() or key != key.strip() or len(key.encode()) > MAX_KEY_BYTES:
        raise InvalidArgument(
            f"state key must be printable, without surrounding spaces, at most"
            f" {MAX_KEY_BYTES} bytes: {key[:40]!r}"
        )
    return key


def check_value(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"state value must be a string (JSON, say), got {type(value)}")
    if len(value.encode()) > MAX_VALUE_BYTES:
        raise InvalidArgument(f"state value is larger than {MAX_VALUE_BYTES} bytes")
    return value


class StateBase:
    """The state space of the lock a lease holds: read by anyone, written only under the
    current grant. ``put`` and ``delete`` raise ``LeaseLost`` (and the lease is lost) when the
    store says the grant is no longer current; nothing is written then."""

    def __init__(self, lease: LeaseBase, records: Records, lock: str) -> None:
        self._lease = lease
        self._records = records
        self.lock = lock
        """The lock whose state this is (the lock the store holds for the grant)."""
        self._prefix = space_prefix(lock)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self.lock!r}>"

    def _portal(self) -> LoopThread:
        return self._lease._portal()

    async def _get(self, key: str) -> str | None:
        """The value of ``key``, or None if it has none."""
        record = await self._records.read_record(self._prefix + check_key(key))
        return None if record is None else record.value

    get = io(_get)

    async def _items(self) -> dict[str, str]:
        """Every key of the space and its value, in key order."""
        found = await self._records.list_records(self._prefix)
        return {record.key[len(self._prefix) :]: record.value for record in found}

    items = io(_items)

    async def _put(self, key: str, value: str) -> None:
        """Set ``key`` to ``value`` if this lease's grant is still current (else ``LeaseLost``)."""
        await self._lease._write_held(self._prefix + check_key(key), check_value(value))

    put = io(_put)

    async def _delete(self, key: str) -> None:
        """Remove ``key`` if this lease's grant is still current (else ``LeaseLost``); a key
        that is not there is not an error."""
        await self._lease._write_held(self._prefix + check_key(key), None)

    delete = io(_delete)


class AsyncLockState(StateBase, Async):
    """The state space of an async lease: ``await lease.state.put(key, value)``."""


class LockState(StateBase, Blocking):
    """The state space of a sync lease: ``lease.state.put(key, value)``."""
