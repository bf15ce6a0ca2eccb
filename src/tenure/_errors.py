"""The one error hierarchy.

TenureError
├── InvalidArgument (ValueError)    you did it: a bad name, TTL, URL or option
├── StoreUnavailable (ConnectionError)  the store cannot be reached, read or written
├── NotAcquired (TimeoutError)      the lock is held elsewhere (no wait, or the timeout passed)
├── LeaseLost                       the world did it: the lease expired or the store dropped it
└── StaleToken                      a fence refused a token lower than one it already accepted
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
