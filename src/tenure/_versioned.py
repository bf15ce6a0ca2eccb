"""A value in the store's records, updated without a lock: read it and its version, compute,
write only if the version is still the one read (``Records.write_record`` is that
compare-and-set), and try again after a short random back-off when another writer came first.

``client.versioned(key)`` gives a `Versioned` (`AsyncVersioned`): ``get()`` and
``update(change)``. Nothing is ever lost to a concurrent writer: the loser of a race computes
again from the winner's value. The back-off (`delays`) is shared with ``tenure.optimistic``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import anyio

from ._errors import InvalidArgument, WriteConflict
from ._lockstate import check_value
from ._modes import Async, Blocking, io
from .stores._spi import records_of

if TYPE_CHECKING:
    from ._loop_thread import LoopThread
    from ._pool import SessionPool

PREFIX = "versioned:"
"""Where the values are among a store's records (a colon before the first slash: no slot's)."""
DEFAULT_ATTEMPTS = 8


def delays(attempts: int, first: float = 0.005, cap: float = 0.5) -> Iterator[float]:
    """The pauses between ``attempts`` tries: "full jitter" (a random time up to an
    exponentially growing bound), so writers that collided once do not collide again in step."""
    for n in range(attempts - 1):
        yield random.uniform(0, min(cap, first * 2**n))


def check_attempts(attempts: object) -> int:
    if isinstance(attempts, bool) or not isinstance(attempts, int) or not 1 <= attempts <= 1000:
        raise InvalidArgument(f"attempts must be an integer in 1..1000, got {attempts!r}")
    return attempts


class VersionedBase:
    """One value in the store's records, updated by compare-and-set."""

    def __init__(self, pool: SessionPool, key: str, *, attempts: int = DEFAULT_ATTEMPTS) -> None:
        """Value ``key`` (printable, at most 200 bytes); ``attempts``: how many times `update`
        computes and tries to write before it gives up with ``WriteConflict``."""
        if not isinstance(key, str) or not key or not key.isprintable() or len(key.encode()) > 200:
            raise InvalidArgument(f"key must be printable text of 1 to 200 bytes, got {key!r}")
        self._pool = pool
        self.key = key
        self.attempts = check_attempts(attempts)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.key!r}>"

    def _portal(self) -> LoopThread:
        assert self._pool.portal is not None
        return self._pool.portal

    async def _get(self) -> str | None:
        """The value now (None if it was never written)."""
        found = await records_of(self._pool.store).read_record(PREFIX + self.key)
        return None if found is None else found.value

    get = io(_get)

    async def _update(
        self, change: Callable[[str | None], str], *, attempts: int | None = None
    ) -> str:
        """Write ``change(value)`` in place of the value it was given (None: none yet), only
        if nobody wrote in between; else compute again from the newer value, after a random
        back-off. Returns the value written; ``WriteConflict`` after ``attempts`` tries lost
        (nothing written). ``change`` may run more than once: keep it free of side effects."""
        records, key = records_of(self._pool.store), PREFIX + self.key
        tries = self.attempts if attempts is None else check_attempts(attempts)
        pauses = delays(tries)
        for _ in range(tries):
            found = await records.read_record(key)
            value = check_value(change(None if found is None else found.value))
            if await records.write_record(key, value, 0 if found is None else found.version):
                return value
            pause = next(pauses, None)
            if pause is not None:
                await anyio.sleep(pause)
        raise WriteConflict(f"value {self.key!r}", tries)

    update = io(_update)


class AsyncVersioned(VersionedBase, Async):
    """A value of the async client: ``await client.versioned(key).update(change)``."""


class Versioned(VersionedBase, Blocking):
    """A value of the sync client: ``client.versioned(key).update(change)``."""
