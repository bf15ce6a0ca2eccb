"""What every fence checks first, and how every fence refuses: written once for all of them."""

from __future__ import annotations

from .. import _observe
from .._errors import InvalidArgument, StaleToken

MAX_TOKEN = 2**63 - 1
"""The largest token a fence keeps: a signed 64-bit integer (SQL ``BIGINT``, Redis integers)."""


def check(resource: object, token: object) -> None:
    """One-line ``InvalidArgument`` unless ``resource`` is a non-empty string without NUL and
    ``token`` an integer in 0..2**63-1."""
    if not isinstance(resource, str) or not resource or "\x00" in resource:
        raise InvalidArgument(
            f"fence resource must be a non-empty string without NUL, not {resource!r}"
        )
    if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token <= MAX_TOKEN:
        raise InvalidArgument(f"fencing token must be an integer in 0..2**63-1, not {token!r}")


def refused(fence: str, resource: str, token: int, highest: int) -> StaleToken:
    """The error that refuses ``token``, told to observers (``tenure.metrics``) first; ``fence``
    is the refusing fence's class name (the metric's label)."""
    if _observe.listeners:
        _observe.fence_refused(fence, resource)
    return StaleToken(resource, token, highest)
