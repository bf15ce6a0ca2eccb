"""The values tenure shows its users: what a store promises, who holds a lock, what a lock is
now. Plain frozen data, imported by the errors, the store contract and the client alike."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar, Literal


@dataclass(frozen=True)
class Capabilities:
    """What a store can promise (the docs' store table is made from these).

    The guarantees are declared by each store class; ``elections`` and ``records`` are not
    declared but derived from the calls the class implements (``tenure.stores._spi``)."""

    grade: Literal["correctness", "efficiency"]
    """'efficiency': fine to avoid duplicate work, not for correctness (e.g. Redis)."""
    machines: Literal["one", "many"]
    """Whether clients on different machines can share locks."""
    durable_tokens: bool
    """A token is committed durably before it is returned and never reissued after a crash."""
    store_judges_expiry: bool
    """Expiry is decided by the store's clock (rule 2), not by a client's."""
    fair: bool
    """Waiters are served in arrival order."""
    native_wait: bool
    """Waiters are woken by the store (watch, notify, kernel), not by polling alone."""
    notes: str = ""
    elections: bool = False
    """Leader election: the store implements ``Elections`` (proclaim, watch)."""
    records: bool = False
    """Conditional records (``tenure once``, ``cron``): the store implements ``Records``."""
    revoke: bool = False
    """An operator can end a grant safely (``tenure revoke``): the store implements
    ``Revocations``."""

    OFFERS: ClassVar[tuple[str, ...]] = ("elections", "records", "revoke")
    """The derived capabilities, by name (what ``require=`` may ask for besides a grade)."""


@dataclass(frozen=True)
class Holder:
    """Who holds a grant (its client's session): shown by ``tenure ls`` and to waiters."""

    host: str
    pid: int
    label: str = ""


@dataclass(frozen=True)
class LockInfo:
    """One lock as the store sees it now."""

    name: str
    token: int
    holder: Holder
    expires_in: float
    """Seconds until the store would expire the holder's lease, if not renewed."""
    waiters: int = 0
    value: str | None = None
    """What the holder proclaimed (leader election: who leads, where); None if nothing."""


@dataclass(frozen=True)
class Revocation:
    """An operator's end of one grant (``client.revoke``, ``tenure revoke``): which, by whom,
    when and why, and until when the store keeps the name from everyone (docs/revoke.md)."""

    name: str
    token: int
    """The token of the grant that was revoked."""
    by: Holder
    """Who revoked it: the revoking client's host, pid and label."""
    user: str
    """The revoking process's user name."""
    at: float
    """When, by the revoker's wall clock (seconds since the epoch)."""
    reason: str
    now: bool
    """True: the name was freed at once (``--now``), without waiting out the old lease."""
    free_in: float = 0.0
    """Seconds after the revocation until the store grants the name again, by its clock: the
    old lease's time left plus its lock-delay (0 with ``now``)."""

    def describe(self) -> str:
        """One line: who revoked the grant, from where, when and why."""
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.at))
        label = f" ({self.by.label})" if self.by.label else ""
        why = f": {self.reason}" if self.reason else ""
        return f"revoked by {self.user}@{self.by.host} pid {self.by.pid}{label} at {when}{why}"


@dataclass(frozen=True)
class LockDelay:
    """A name that is free but kept from everyone by lock-delay: its last lease ended without a
    release and its lock-delay has not passed (docs/design.md rule 8)."""

    name: str
    token: int
    """The token of the lease that ended (0 if the store no longer knows it)."""
    free_in: float
    """Seconds until the store grants the name again, by the store's clock."""
    revoked: Revocation | None = None
    """The revocation that ended the lease, if an operator revoked it (else None)."""


@dataclass(frozen=True)
class Change:
    """One change of a lock, as a `Watch` reports it: its state right after the change."""

    name: str
    holder: LockInfo | None
    """The holder and its value after the change (``expires_in`` may be 0: unknown); None when
    the lock was released or freed."""


@dataclass(frozen=True)
class Record:
    """A small durable record (``tenure.once``'s slots): text, and a version the store changes
    on every write, so that a write can be made conditional on what the writer last read."""

    key: str
    value: str
    version: int
    """Positive; a write of the record makes it different (not necessarily larger)."""
