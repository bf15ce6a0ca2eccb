"""The session keeper: one per (client, TTL), renewing every lock the session holds at once.

The only renewal loop in tenure; every store and both APIs use it (docs/design.md rules
3–5). It renews every ttl/3, retries with back-off inside the window, never waits for an
answer past the deadline, and turns "the store says gone" or "the deadline passed" into loss
of every lease the session holds. It tells each holder through the callbacks the holder
attached (`Listener`): the keeper knows nothing of what a lease is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from . import _observe
from ._clock import Clock
from ._errors import StoreUnavailable
from ._state import LeaseState, Loss, Timing
from ._values import Holder, Revocation
from .stores._spi import Session, Store, revocations_of

if TYPE_CHECKING:
    from ._loop_thread import LoopThread

log = logging.getLogger("tenure")


@dataclass(frozen=True)
class Listener:
    """What one holder of the session (a lease) is told, each at most once per event."""

    lost: Callable[[str, Loss], None]
    """The lease is lost (its session, or its grant alone if revoked), with the reason."""
    at_risk: Callable[[], None]
    """Renewals are overdue: the leases are at risk."""
    closed: Callable[[], None]
    """The session was closed by its client: the lease is released."""
    held: tuple[str, int] = ("", 0)
    """The lock the store holds for this holder (name, token): what a revocation names."""


class SessionKeeper:
    def __init__(self, store: Store, handle: Session, state: LeaseState, clock: Clock) -> None:
        self.store = store
        self.handle = handle
        self.state = state
        self.clock = clock
        self.portal: LoopThread | None = None
        """The event-loop thread of a sync client's session (what its blocking leases use)."""
        self._listeners: dict[object, Listener] = {}
        self._stopped = anyio.Event()
        self._cut: set[anyio.CancelScope] = set()

    def attach(self, holder: object, listener: Listener) -> None:
        """Tell ``listener`` of loss, risk and closing until ``holder`` is released."""
        self._listeners[holder] = listener

    def held(self) -> list[object]:
        """The holders told of this session's events now (its leases)."""
        return list(self._listeners)

    @property
    def holders(self) -> int:
        """How many grants the session holds now."""
        return len(self._listeners)

    @classmethod
    async def open(cls, store: Store, timing: Timing, owner: Holder, clock: Clock) -> SessionKeeper:
        t_sent = clock.now()
        handle = await store.open_session(timing.ttl, owner, timing.lock_delay)
        return cls(store, handle, LeaseState(timing, t_sent), clock)

    def cut_at_end(self, within: float) -> anyio.CancelScope:
        """A cancel scope (quiet) that ends after ``within`` seconds or when the session is lost
        or closed, whichever comes first: a waiter's ticket dies with the session. Call `uncut`
        with it once its block is over. One scope, not a task racing the block nor a scope per
        cause: an idle waiter costs memory, and a thousand of them may wait on one session."""
        scope = anyio.CancelScope(deadline=anyio.current_time() + within)
        if self._stopped.is_set():
            scope.cancel()
        self._cut.add(scope)
        return scope

    def uncut(self, scope: anyio.CancelScope) -> None:
        """Forget a scope of `cut_at_end` (its block is over)."""
        self._cut.discard(scope)

    def _end(self) -> None:
        self._stopped.set()
        if self.portal is not None:  # a sync lease's `lost` may notice the end on its thread
            self.portal.soon(self._cut_short)
        else:
            self._cut_short()

    def _cut_short(self) -> None:
        for scope in list(self._cut):
            scope.cancel()

    def expired(self) -> bool:
        """Lost, or past the deadline (noticed even if this task is starved)."""
        if self.state.expire(self.clock.now()):
            self._lose_leases()
        return self.state.lost

    def lose(self, reason: str, loss: Loss = Loss.ERROR) -> None:
        if self.state.lose(reason, loss):
            log.warning("tenure: session on %s lost: %s", self.store.url, reason)
        self._lose_leases()

    def _lose_leases(self) -> None:
        reason = self.state.lost_reason or "lost"
        loss = self.state.loss or Loss.ERROR
        if _observe.listeners and not self._stopped.is_set():  # the first time only
            _observe.lost(self.store, loss.name.lower(), len(self._listeners))
        for listener in list(self._listeners.values()):
            listener.lost(reason, loss)
        self._end()

    def _lose_revoked(self, revoked: list[Revocation]) -> None:
        """Lose the leases whose grants were revoked; the session and its other leases live
        on. Done before the renewal that told us is confirmed, so a revoked lease's deadline
        never moves past the one it had when it was revoked."""
        ended = {(each.name, each.token): each for each in revoked}
        for listener in list(self._listeners.values()):
            if (revocation := ended.get(listener.held)) is not None:
                log.warning("tenure: lease on %r %s", revocation.name, revocation.describe())
                listener.lost(revocation.describe(), Loss.REVOKED)

    async def _keep_alive(self) -> bool:
        """One renewal: is the session alive, and which of its grants were revoked?"""
        alive = await self.store.keep_alive(self.handle)
        if alive and self._listeners and self.store.capabilities.revoke:
            self._lose_revoked(await revocations_of(self.store).revoked(self.handle))
        return alive

    async def run(self) -> None:
        """Keep the session alive until it is lost or closed."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch_deadline)
            await self._renew_loop()
            tg.cancel_scope.cancel()

    async def _watch_deadline(self) -> None:
        """Say when the leases are at risk, and declare loss at the deadline, even while a
        renewal call is stuck (e.g. in a thread)."""
        warned_at: float | None = None  # the at-risk time already announced
        while not self.expired():
            now = self.clock.now()
            at_risk_at = self.state.at_risk_at
            if now >= at_risk_at and warned_at != at_risk_at:
                warned_at = at_risk_at
                if _observe.listeners:
                    _observe.at_risk(self.store, len(self._listeners))
                for listener in list(self._listeners.values()):
                    listener.at_risk()
            wake = self.state.deadline if warned_at == at_risk_at else at_risk_at
            await anyio.sleep(max(0.0, min(wake, self.state.deadline) - now))

    async def _renew_loop(self) -> None:
        while not self.expired() and not self._stopped.is_set():
            with anyio.move_on_after(self.state.next_renewal() - self.clock.now()):
                await self._stopped.wait()
            if self._stopped.is_set():
                return
            await self._renew()

    async def _renew(self) -> None:
        attempt = 0
        while not self.expired():
            t_sent = self.clock.now()
            try:
                # Never wait for an answer past the deadline: by then the lease is lost anyway.
                with anyio.fail_after(max(0.0, self.state.deadline - t_sent)):
                    alive = await self._keep_alive()
            except TimeoutError:
                if _observe.listeners:
                    self._tell_renewal("timeout", "timeout", t_sent)
                self.expired()
                continue
            except StoreUnavailable as exc:
                if _observe.listeners:
                    self._tell_renewal("retry", "unavailable", t_sent)
                attempt += 1
                log.info("tenure: renewal %d failed (%s); retrying", attempt, exc)
                await anyio.sleep(self.state.retry_delay(attempt, self.clock.now()))
                continue
            except Exception as exc:  # a store's bug must still end in a loud, orderly loss
                if _observe.listeners:
                    self._tell_renewal("error", "unexpected", t_sent)
                log.exception("tenure: renewal raised an unexpected error")
                self.lose(f"renewal failed unexpectedly: {exc!r}")
                return
            now, stop_by = self.clock.now(), self.state.deadline  # the stop-by this one replaces
            outcome: _observe.Renewal = "ok"
            if not alive:
                outcome = "gone"
                self.lose("the store says the session is gone", Loss.GONE)
            elif not self.state.confirm(t_sent, now):
                outcome = "late"
                self._lose_leases()
            if _observe.listeners:
                slack = stop_by - now if outcome == "ok" else None
                _observe.renewed(self.store, outcome, now - t_sent, slack)
            return

    def _tell_renewal(
        self, outcome: _observe.Renewal, error: _observe.StoreError, t_sent: float
    ) -> None:
        """A renewal the store did not answer, and the store's error."""
        _observe.renewed(self.store, outcome, self.clock.now() - t_sent, None)
        _observe.store_error(self.store, "renew", error)

    def confirm_grant(self, t_sent: float) -> bool:
        """A grant that also renewed the session: its deadline counts from ``t_sent``."""
        if self.state.confirm(t_sent, self.clock.now()):
            return True
        self._lose_leases()
        return False

    async def release(
        self, holder: object, name: str, token: int, lost: bool, revoked: bool = False
    ) -> None:
        """Forget ``holder``; unless its grant is ``lost``, delete the lock in the store. A
        ``revoked`` grant is released too, for the store to forget what it kept of it for this
        session (the store took the lock itself: the release deletes nothing)."""
        self._listeners.pop(holder, None)
        if lost and not revoked:
            return
        try:
            with anyio.CancelScope(shield=True):
                await self.store.release(self.handle, name, token)
        except StoreUnavailable as exc:
            if _observe.listeners:
                _observe.store_error(self.store, "release", "unavailable")
            if revoked:  # nothing of ours is held: the session and its other locks go on
                log.info("tenure: release of revoked %r failed (%s)", name, exc)
                return
            # The lock cannot be deleted now; stop renewing the session so it expires within ttl.
            self.lose(f"release of {name!r} failed ({exc}); session abandoned")

    async def close(self) -> None:
        """Release everything the session holds and end it (shielded from cancellation)."""
        self._end()
        listeners, self._listeners = list(self._listeners.values()), {}
        for listener in listeners:
            listener.closed()
        if self.state.lost:
            return
        self.state.lose("session closed", Loss.CLOSED)
        with anyio.CancelScope(shield=True):
            try:
                await self.store.close_session(self.handle)
            except StoreUnavailable as exc:
                log.warning("tenure: could not close session on %s: %s", self.store.url, exc)
