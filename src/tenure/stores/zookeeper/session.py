"""The ZooKeeper store's handles: a session (one kazoo client, one ZooKeeper session) and a
waiter's ticket (its node in a lock's queue, and what it waits for)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..._values import Holder
from .._kit import InDoubt, patience
from .._spi import Session
from .nodes import node_data
from .transport import Wakeup, waker

if TYPE_CHECKING:
    from kazoo.client import KazooClient  # type: ignore[import-untyped]


class Gone(Exception):
    """The session expired (or was closed)."""


@dataclass(eq=False)
class ZooKeeperSession(Session):
    ttl: float
    client: KazooClient
    connection: Any
    session_id: int
    tag: str
    owner: Holder
    granted: float
    """The session timeout the server granted (seconds): a holder's ``expires_in``."""
    counter: int = 0
    held: dict[tuple[str, int], str] = field(default_factory=dict)
    """(name, token) → own node path of the grants this session holds."""
    in_doubt: InDoubt[tuple[str, str]] = field(default_factory=InDoubt)
    """(parent, prefix) of creates whose answer was lost: deleted at the next keep-alive."""
    closed: bool = False
    lock_delay: float = 0.0
    marks: dict[tuple[str, int], int] = field(default_factory=dict)
    """(name, token) → data version of the hold-back marker this session's grant put."""
    free: set[str] = field(default_factory=set)
    """Names whose marker this session last saw gone (its own release deleted it, no one
    waiting): its next attempt on one puts its marker in the multi that creates its node."""
    crowded: set[str] = field(default_factory=set)
    """Names whose queue this session last found others in, ahead of it: its next attempt
    does not read the marker with its create (it matters to the first in line only)."""
    alone: set[tuple[str, int]] = field(default_factory=set)
    """(name, token) of grants that found no one else in the queue."""
    notices: set[str] = field(default_factory=set)
    """The revocation notices the last ``revoked`` returned: acted on, deleted by the next."""
    call: Callable[[Callable[[], object]], None] | None = None
    """`waker()` of the loop this session is used on: its waiters' watches wake them by it."""

    @property
    def gone(self) -> bool:
        return bool(self.connection.ended)

    @property
    def patience(self) -> float:
        """How long to wait for one answer before trying another server."""
        return patience(self.ttl, 2.0, floor=0.3, share=3)

    def prefix(self) -> str:
        self.counter += 1
        return f"{self.tag}-{self.counter:x}-"

    def data(self) -> bytes:
        """The data of this session's lock nodes."""
        return node_data(self.owner, self.granted)


@dataclass(eq=False, slots=True)  # slots: a thousand may wait on one client
class ZooKeeperTicket:
    session: ZooKeeperSession
    name: str
    path: str
    czxid: int
    """The own node's creation zxid: the token, if this node comes first."""
    predecessor: str | None = None
    """What `wait` watches, as the last attempt found it: the node before this one in the
    queue, or the hold-back marker when this one is first in line (None: nothing, poll)."""
    left: bool = False
    armed: bool = False
    """The last attempt set the watch on ``predecessor``: `wait` awaits its wake-up."""
    event: Wakeup | None = None

    def on_watch(self, _event: object) -> None:  # kazoo's thread: hand over, nothing more
        if self.event is not None:
            self.event.set_soon()

    on_watch.direct = True  # type: ignore[attr-defined]  # run on kazoo's connection thread

    def arm(self) -> Wakeup:
        """A new wake-up, before the watch that sets it is sent."""
        if self.session.call is None:
            self.session.call = waker()
        self.event = Wakeup(self.session.call)
        return self.event

    def wake(self) -> None:
        """Wake `wait` (on the loop)."""
        if self.event is not None:
            self.event.set()
