"""What the holder's clients (`HTTPXAuth`, `RequestsAuth`) share: the headers they send, and
the fence's refusal read back as ``tenure.StaleToken``."""

from __future__ import annotations

import json
from typing import Protocol

from .._errors import StaleToken
from ._tokens import check
from .http import RESOURCE_HEADER, STALE, TOKEN_HEADER

__all__ = ["HasToken", "Stamping", "headers", "stale"]


class HasToken(Protocol):
    """A lease, or anything with a fencing ``token``."""

    @property
    def token(self) -> int:
        """The fencing token."""


def headers(
    lease: HasToken | int, resource: str | None, token_header: str, resource_header: str
) -> dict[str, bytes]:
    """The headers a holder sends: its token (read from the lease now), and the resource."""
    token = lease if isinstance(lease, int) else getattr(lease, "token", lease)
    # The service may name the resource itself; then only the token is checked here.
    check(resource if resource is not None else "-", token)
    sent = {token_header: str(token).encode()}
    if resource is not None:
        sent[resource_header] = resource.encode()  # UTF-8: a name need not be ASCII
    return sent


class Stamping:
    """What both clients are given: the lease (or token), the resource and the header names;
    `sent` is the headers of one request."""

    def __init__(
        self,
        lease: HasToken | int,
        resource: str | None = None,
        *,
        token_header: str = TOKEN_HEADER,
        resource_header: str = RESOURCE_HEADER,
    ) -> None:
        self.lease = lease
        self.resource = resource
        self.token_header = token_header
        self.resource_header = resource_header

    def sent(self) -> dict[str, bytes]:
        """The headers to send now (the lease's token as it is now)."""
        return headers(self.lease, self.resource, self.token_header, self.resource_header)


def stale(status: int, body: bytes) -> StaleToken | None:
    """The `StaleToken` a fence's 409 reports, or None for any other response."""
    if status != 409:
        return None
    try:
        found = json.loads(body)
    except ValueError:
        return None
    if not isinstance(found, dict) or found.get("error") != STALE:
        return None
    resource, token, highest = found.get("resource"), found.get("token"), found.get("highest")
    if isinstance(resource, str) and isinstance(token, int) and isinstance(highest, int):
        return StaleToken(resource, token, highest)
    return None
