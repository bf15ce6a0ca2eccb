"""The session and the ticket of both Redis stores: one server's or a quorum's, the same."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from .._kit import InDoubt
from .._spi import Session


@dataclass(eq=False)
class RedisSession(Session):
    """A session key (``P:s:<id>``) on one server, or on each server of a Redlock store."""

    id: str
    ttl: float
    owner: str
    """The owner's JSON, the session key's value."""
    seq: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    held: dict[tuple[str, int], str] = field(default_factory=dict)
    """(name, token) → request id of the grants this session holds."""
    in_doubt: InDoubt[tuple[str, str]] = field(default_factory=InDoubt)
    """(name, request id) of requests whose answer was lost: left at the next keep-alive."""

    def request(self) -> str:
        """A new request id, ``<session>/<n>``: it names one attempt on every server."""
        return f"{self.id}/{next(self.seq)}"

    def forget(self) -> None:
        """The session is closed: it holds nothing and owes nothing."""
        self.held.clear()
        self.in_doubt.clear()


@dataclass(eq=False)
class RedisTicket:
    """A waiter's place in a lock's queue (on every server: one request id, one score)."""

    session: RedisSession
    name: str
    rid: str
    score: str
    handed: int | None = None
    """The token a hand-over pushed to us (read by ``wait``): ``attempt`` returns it at once
    (one server only: Redlock attempts again, to count the servers)."""
    left: bool = False

    def leaving(self) -> bool:
        """True the first time only: leaving is idempotent."""
        if self.left:
            return False
        self.left = True
        return True
