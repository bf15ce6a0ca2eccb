"""The one error hierarchy.

TenureError
├── InvalidArgument (ValueError)    you did it: a bad name, TTL, URL or option
│   └── KeyReused                   an idempotency key sent again with a different request
├── StoreUnavailable (ConnectionError)  the store cannot be reached, read or written
├── NotAcquired (TimeoutError)      the lock is held elsewhere (no wait, or the timeout passed)
├── LeaseLost                       the world did it: the lease expired or the store dropped it
├── StaleToken                      a fence refused a token lower than one it already accepted
└── WriteConflict                   a conditional write kept losing to other writers: gave up
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._values import LockInfo


class TenureError(Exception):
    """Root of every error tenure raises."""


class InvalidArgument(TenureError, ValueError):
    """An argument, URL or option is malformed or out of range."""


class StoreUnavailable(TenureError, ConnectionError):
    """The store cannot be reached, opened, read or written."""


class NotAcquired(TenureError, TimeoutError):
    """The lock is held by someone else and the caller would not (or could no longer) wait."""

    def __init__(self, message: str, lock: LockInfo | None = None) -> None:
        super().__init__(message)
        self.lock = lock
        """The lock as the store saw it (its ``holder``, ``token``), if it said."""


class LeaseLost(TenureError):
    """The lease expired or the store says it is gone; acting under it is no longer safe."""


class StaleToken(TenureError):
    """A fence refused a token lower than the highest it has accepted for that resource."""

    def __init__(self, resource: str, token: int, highest: int) -> None:
        super().__init__(
            f"stale fencing token {token} for {resource!r}: {highest} was already accepted"
        )
        self.resource = resource
        self.token = token
        self.highest = highest


class KeyReused(InvalidArgument):
    """An idempotency key was sent again with a request other than the one it was first used
    for (a different fingerprint): a caller's mistake, refused before anything runs."""

    def __init__(self, key: str, fingerprint: str, first: str) -> None:
        super().__init__(
            f"idempotency key {key!r} was first used for another request (fingerprint"
            f" {first[:16]!r}, not {fingerprint[:16]!r}): use a new key for a new request"
        )
        self.key = key
        self.fingerprint = fingerprint
        """The fingerprint of the request refused."""
        self.first = first
        """The fingerprint of the request the key was first used for."""


class WriteConflict(TenureError):
    """A conditional write (a version check) lost to another writer on every attempt: the
    retries ran out, and nothing was written by this caller."""

    def __init__(self, what: str, attempts: int) -> None:
        super().__init__(
            f"{what} was changed by another writer on each of {attempts} attempts: gave up,"
            " nothing written"
        )
        self.what = what
        self.attempts = attempts
