"""The one place that reads the real clock.

Leases are timed on a monotonic clock, never wall time (docs/design.md rule 2). On Linux this is
CLOCK_BOOTTIME: it keeps counting while the machine is suspended, so a holder's own deadline
never outlives the store's view of its lease across a suspend; elsewhere, time.monotonic().
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """A source of monotonic seconds. Tests inject their own."""

    def now(self) -> float:
        """Seconds on a monotonic clock (only differences mean anything)."""


_CLOCK_ID = getattr(time, "CLOCK_BOOTTIME", None)


class MonotonicClock:
    """The real clock: CLOCK_BOOTTIME where the platform has it, else time.monotonic()."""

    def now(self) -> float:
        """Seconds on a monotonic clock (only differences mean anything)."""
        if _CLOCK_ID is not None:
            return time.clock_gettime(_CLOCK_ID)
        return time.monotonic()


REAL_CLOCK: Clock = MonotonicClock()
