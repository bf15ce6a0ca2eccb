"""Public testing tools: test your own loss handling with what tenure's tests use."""

from .faults import FaultyStore
from .proxy import ChaosProxy

__all__ = ["ChaosProxy", "FaultyStore"]
