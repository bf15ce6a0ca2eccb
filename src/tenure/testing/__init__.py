"""Public testing tools: test your own loss handling with what tenure's tests use — a store
that fails on demand (`FaultyStore`), a TCP proxy that cuts, delays or blackholes a
connection (`ChaosProxy`), and clocks you move yourself (`ManualClock`, `ScaledClock`).
docs/testing.md shows them in a test."""

from .clock import ManualClock, ScaledClock
from .faults import FaultyStore
from .proxy import ChaosProxy

__all__ = ["ChaosProxy", "FaultyStore", "ManualClock", "ScaledClock"]
