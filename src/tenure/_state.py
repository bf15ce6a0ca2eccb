"""Lease timing as a pure state machine: no I/O, no real clock.

A holder's deadline is conservative (docs/design.md rule 3)::

    deadline = t_sent + ttl * (1 - drift) - margin

where ``t_sent`` is when the grant or renewal request was *sent*. Renewal is due every ttl/3
(rule 4). Once lost, the state stays lost (rule 5): a confirmation that arrives after the
deadline has passed cannot revive it.

Before that, a lease is *at risk* once a renewal is a whole renewal period overdue (2·ttl/3
after the last confirmed request was sent): work should stop then, and be done by the deadline
(its ``stop_by``). A supervisor's grace (SIGTERM to SIGKILL) fits between the two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from ._errors import InvalidArgument


class Loss(Enum):
    """Why a lease was lost; what a supervisor must do differs."""

    DEADLINE = "renewals failed"
    """The deadline passed without a confirmed renewal: the store expires it soon after."""
    GONE = "the store says the session is gone"
    """Someone else may hold the lock already."""
    ERROR = "renewal failed unexpectedly"
    """A store bug or an abandoned session: treated like failed renewals."""
    CLOSED = "session closed"
    REVOKED = "revoked"
    """An operator revoked the grant (``tenure revoke``); the name stays held back until the
    old lease could no longer be acting, unless revoked with ``now``."""


DEFAULT_TTL = 30.0
"""Seconds a lease lasts without a renewal unless a primitive is given another TTL."""
DEFAULT_DRIFT = 0.01
"""Assumed worst-case rate difference between this host's clock and the store's (1%)."""
DEFAULT_MARGIN = 0.1
"""Seconds taken off every deadline for scheduling delay between a check and the act."""
MAX_TTL = 7 * 24 * 3600.0
LOCK_DELAY_CAP = 15.0
"""The default lock-delay is one TTL, but never more than this (Consul's ``LockDelay``)."""
MAX_LOCK_DELAY = 3600.0


def default_lock_delay(ttl: float) -> float:
    """One TTL, at most 15 s: a fail-over after a crash takes at most twice the TTL the user
    chose, and a holder frozen for up to that long cannot overlap the next one."""
    return min(ttl, LOCK_DELAY_CAP)


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{what} must be a number of seconds, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise InvalidArgument(f"{what} must be finite, got {value!r}")
    return number


@dataclass(frozen=True, init=False)
class Timing:
    """The timing of one TTL: how long a grant is valid locally, and when to renew it."""

    ttl: float
    drift: float
    margin: float
    lock_delay: float
    """Seconds a name is kept from everyone after a lease on it ends without a release
    (rule 8): the delay that applies — as given, or `default_lock_delay` of the TTL."""

    def __init__(
        self,
        ttl: float,
        drift: float = DEFAULT_DRIFT,
        margin: float = DEFAULT_MARGIN,
        lock_delay: float | None = None,
    ) -> None:
        ttl = _number(ttl, "ttl")
        drift = _number(drift, "drift")
        margin = _number(margin, "margin")
        if ttl <= 0 or ttl > MAX_TTL:
            raise InvalidArgument(f"ttl must be in (0, {MAX_TTL:.0f}] seconds, got {ttl!r}")
        delay = _number(default_lock_delay(ttl) if lock_delay is None else lock_delay, "lock_delay")
        if not 0 <= delay <= MAX_LOCK_DELAY:
            raise InvalidArgument(
                f"lock_delay must be in [0, {MAX_LOCK_DELAY:.0f}] seconds, got {lock_delay!r}"
            )
        object.__setattr__(self, "lock_delay", delay)
        if not 0 <= drift < 0.5:
            raise InvalidArgument(f"drift must be in [0, 0.5), got {drift!r}")
        if margin < 0:
            raise InvalidArgument(f"margin must be >= 0, got {margin!r}")
        object.__setattr__(self, "ttl", ttl)
        object.__setattr__(self, "drift", drift)
        object.__setattr__(self, "margin", margin)
        if self.valid_for <= self.renew_every:
            raise InvalidArgument(
                f"ttl {ttl:g}s is too short for margin {margin:g}s and drift {drift:g}: "
                "the lease would expire before its first renewal"
            )

    @property
    def valid_for(self) -> float:
        """How long after sending a request the holder may still act on its answer."""
        return self.ttl * (1 - self.drift) - self.margin

    @property
    def renew_every(self) -> float:
        """Seconds between renewals: a third of the TTL."""
        return self.ttl / 3

    @property
    def at_risk_after(self) -> float:
        """How long after sending a request its lease is at risk if no renewal is confirmed:
        one renewal period after the renewal was due, with all its retries."""
        return 2 * self.renew_every

    @property
    def max_grace(self) -> float:
        """The largest grace (SIGTERM to SIGKILL at the deadline) that still sends SIGTERM
        only once the lease is at risk, after a whole renewal period of attempts."""
        return max(0.0, round(self.valid_for - self.at_risk_after, 2))

    def check_grace(self, grace: float | None) -> float:
        """``grace`` (None: `max_grace`), or ``InvalidArgument`` naming the largest allowed."""
        if grace is None:
            return self.max_grace
        grace = _number(grace, "grace")
        if grace < 0:
            raise InvalidArgument(f"grace must be >= 0 seconds, got {grace:g}")
        if grace > self.max_grace:
            raise InvalidArgument(
                f"grace {grace:g}s leaves no time to retry renewals before SIGTERM: with ttl "
                f"{self.ttl:g}s the largest grace is {self.max_grace:g}s (or raise the ttl)"
            )
        return grace


class LeaseState:
    """Deadline bookkeeping of one session (and so of every lease it holds)."""

    def __init__(self, timing: Timing, t_sent: float) -> None:
        self.timing = timing
        self.deadline = t_sent + timing.valid_for
        self.last_sent = t_sent
        self.lost_reason: str | None = None
        self.loss: Loss | None = None

    @property
    def lost(self) -> bool:
        return self.lost_reason is not None

    @property
    def at_risk_at(self) -> float:
        """When the lease becomes at risk unless a renewal sent before then is confirmed."""
        return min(self.last_sent + self.timing.at_risk_after, self.deadline)

    def at_risk(self, now: float) -> bool:
        """Lost, or renewals overdue: stop taking new work, be done by the deadline."""
        return self.lost_reason is not None or now >= self.at_risk_at

    def valid(self, now: float) -> bool:
        """True only while not lost and strictly before the deadline."""
        return self.lost_reason is None and now < self.deadline

    def confirm(self, t_sent: float, now: float) -> bool:
        """Record a renewal the store confirmed; False (and lost) if it came too late."""
        if not self.valid(now):
            self.lose("the lease expired before its renewal was confirmed", Loss.DEADLINE)
            return False
        if t_sent > self.last_sent:
            self.last_sent = t_sent
            self.deadline = max(self.deadline, t_sent + self.timing.valid_for)
        return True

    def lose(self, reason: str, loss: Loss = Loss.ERROR) -> bool:
        """Mark lost for good; True only the first time."""
        if self.lost_reason is not None:
            return False
        self.lost_reason = reason
        self.loss = loss
        return True

    def expire(self, now: float) -> bool:
        """Mark lost if the deadline has passed; True if this call made it lost."""
        if self.lost_reason is None and now >= self.deadline:
            return self.lose("the deadline passed without a confirmed renewal", Loss.DEADLINE)
        return False

    def next_renewal(self) -> float:
        """When the next renewal is due: ttl/3 after the last confirmed request was sent."""
        return self.last_sent + self.timing.renew_every

    def retry_delay(self, attempt: int, now: float) -> float:
        """Back-off before retry number ``attempt`` (1, 2, …), never past the deadline."""
        base = min(self.timing.renew_every / 8, 0.05 * 2 ** (attempt - 1))
        return float(max(0.0, min(base, self.deadline - now)))
