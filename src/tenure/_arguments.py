"""Checks of the arguments every primitive shares: a timeout, and a lock's name, TTL and
timeout together — refused before anything is opened or acquired."""

from __future__ import annotations

import math

from ._errors import InvalidArgument
from ._names import check_name
from ._state import DEFAULT_DRIFT, DEFAULT_MARGIN, Timing


def check_timeout(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise InvalidArgument(f"timeout must be a number of seconds, got {timeout!r}")
    if math.isnan(timeout) or timeout < 0:
        raise InvalidArgument(f"timeout must be >= 0 seconds, got {timeout!r}")
    return float(timeout)


def check_arguments(
    name: str,
    ttl: float,
    timeout: float | None,
    drift: float = DEFAULT_DRIFT,
    margin: float = DEFAULT_MARGIN,
) -> float | None:
    """Refuse a bad lock name, TTL or timeout before anything is opened or acquired."""
    check_name(name)
    Timing(ttl, drift, margin)
    return check_timeout(timeout)
