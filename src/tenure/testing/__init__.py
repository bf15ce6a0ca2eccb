"""Public testing tools: test your own loss handling with what tenure's tests use."""

from .faults import FaultyStore

__all__ = ["FaultyStore"]
