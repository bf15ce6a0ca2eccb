"""Clocks for tests: `ManualClock` moves only when the test says so, `ScaledClock` is the real
clock running fast or slow (a drifting client clock). Both are a `tenure.Clock` (``now()``):
give one to a client (``tenure.Client(store, clock=...)``) and its leases' deadlines,
``remaining()``, ``at_risk`` and ``lost`` are read on it."""

from __future__ import annotations

import threading

from .._clock import REAL_CLOCK


class ManualClock:
    """A monotonic clock that stands still until `advance` moves it (thread-safe).

    A lease's deadline is read on its client's clock: with renewals held back (`FaultyStore`'s
    ``hang_keep_alive``), ``clock.advance(ttl)`` takes a lease past its deadline at once,
    without sleeping. The store keeps its own time: this moves what the client believes."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        """The clock's time, in seconds (only differences mean anything)."""
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move the clock ``seconds`` forward (never back) and return the new time."""
        if seconds < 0:
            raise ValueError(f"a monotonic clock cannot go back ({seconds} s)")
        with self._lock:
            self._now += seconds
            return self._now


class ScaledClock:
    """The real clock running ``rate`` times as fast (a drifting client clock: > 1 fast,
    < 1 slow, as ``tenure chaos``'s clock faults make its workers' clocks)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self._base = REAL_CLOCK.now()

    def now(self) -> float:
        """The scaled time, in seconds since the real clock's origin."""
        return self._base + (REAL_CLOCK.now() - self._base) * self.rate
