"""The sessions of one client: one per (TTL, lock-delay), opened on first use and kept alive by
their keepers on the pool's task group. The recipes (locks, elections, once) take a pool, not the
client: they need a session, the store and the clock, nothing of the client's surface."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup

from ._clock import Clock
from ._errors import TenureError
from ._lease import LeaseBase
from ._session import SessionKeeper
from ._state import Timing
from ._values import Holder
from .stores._spi import Store

if TYPE_CHECKING:
    from ._loop_thread import LoopThread


class SessionPool:
    def __init__(
        self,
        store: Store,
        holder: Holder,
        clock: Clock,
        drift: float,
        margin: float,
        lock_delay: float | None,
        portal: LoopThread | None = None,
    ) -> None:
        self.store = store
        self.portal = portal
        """The event-loop thread a sync client runs on (None: an async client)."""
        self.holder = holder
        self.clock = clock
        self.drift = drift
        self.margin = margin
        self.lock_delay = lock_delay
        self._sessions: dict[tuple[float, float], SessionKeeper] = {}
        self._lock = anyio.Lock()
        self._tg: TaskGroup | None = None

    def timing(self, ttl: float, lock_delay: float | None = None) -> Timing:
        """The timing of a lease with this TTL (``InvalidArgument`` if bad): the pool's drift,
        margin and lock-delay unless ``lock_delay`` is given."""
        delay = self.lock_delay if lock_delay is None else lock_delay
        return Timing(ttl, self.drift, self.margin, delay)

    async def session(self, ttl: float, lock_delay: float | None = None) -> SessionKeeper:
        """The live session for this TTL and lock-delay, opened (and its keeper started) on
        first use."""
        if self._tg is None:
            raise TenureError("use the client as `async with tenure.connect_async(...)`")
        timing = self.timing(ttl, lock_delay)
        key = (timing.ttl, timing.lock_delay)
        keeper = self._sessions.get(key)
        if keeper is not None and not keeper.expired():
            return keeper  # the common case, without a checkpoint
        async with self._lock:
            keeper = self._sessions.get(key)
            if keeper is None or keeper.expired():
                keeper = await SessionKeeper.open(self.store, timing, self.holder, self.clock)
                keeper.portal = self.portal
                self._sessions[key] = keeper
                self._tg.start_soon(keeper.run)
            return keeper

    def held(self) -> list[object]:
        """Every holder of every live session of the pool (the client's leases now)."""
        return [
            h for keeper in self._sessions.values() if not keeper.expired() for h in keeper.held()
        ]

    def holds(self, name: str, caller: object) -> bool:
        """True if a live lease of this pool taken by ``caller`` (a thread or task) holds lock
        ``name``: asking again, it would wait on itself for ever."""
        return any(
            isinstance(h, LeaseBase)
            and h.holds(name)
            and h.caller == caller
            and not (h.released or h.lost)
            for h in self.held()
        )

    def spawn(self, func: Callable[..., Coroutine[Any, Any, object]], *args: Any) -> None:
        """Run ``func(*args)`` on the pool's task group, cancelled when the pool closes."""
        if self._tg is None:
            raise TenureError("use the client as `async with tenure.connect_async(...)`")
        self._tg.start_soon(func, *args)

    async def close_sessions(self) -> None:
        """Release every lock held through the pool and end its sessions."""
        keepers, self._sessions = list(self._sessions.values()), {}
        for keeper in keepers:
            await keeper.close()

    async def __aenter__(self) -> SessionPool:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        # The body's own exception is not the keepers' business: passing it in would come out
        # wrapped in an ExceptionGroup. It propagates unchanged from the caller's block.
        await self._tg.__aexit__(None, None, None)
