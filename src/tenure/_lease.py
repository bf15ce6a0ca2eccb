"""Leases: what a holder has, and how loss reaches it (docs/design.md rule 5).

`LeaseBase` is the lease, written once; `AsyncLease` and the blocking `Lease` are its two
kinds (``tenure._modes``), which differ only in how ``release()`` is called. Loss is decided
by the session's ``LeaseState``; this module turns it into the effects: ``lost`` reads true,
callbacks run once, cancel scopes of ``async with`` bodies are cancelled, ``check()`` raises.
Before loss, ``at_risk`` says renewals are overdue and ``on_at_risk`` callbacks run: stop
taking new work then, and be done by ``stop_by``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from ._errors import LeaseLost
from ._lockstate import AsyncLockState, LockState
from ._modes import Async, Blocking, io
from ._session import Listener
from ._state import Loss
from .stores._spi import elections_of, records_of

if TYPE_CHECKING:
    from ._clock import Clock
    from ._loop_thread import LoopThread
    from ._session import SessionKeeper

LostCallback = Callable[[Any], Any]


class LeaseBase:
    """One grant of one lock to one session: ``token``, ``stop_by``, ``at_risk``, ``loss``,
    ``check()``, the callbacks and ``release()``; the same on every grant that is a lease."""

    def __init__(self, keeper: SessionKeeper, name: str, token: int) -> None:
        """The grant of ``name`` with ``token`` to ``keeper``'s session, from now on told of
        that session's risk, loss and closing."""
        self._keeper = keeper
        self.name = name
        self.token = token
        self._held = (name, token)
        """The lock the store holds for this grant (a recipe may show another name or token)."""
        self.ttl = keeper.state.timing.ttl
        self.caller: object = None
        """Who took the grant (a thread or task; see ``tenure._modes.current_caller``)."""
        self.released = False
        self._lost_reason: str | None = None
        self._loss: Loss | None = None
        self._callbacks: list[LostCallback] = []
        self._at_risk_callbacks: list[LostCallback] = []
        self._scopes: list[anyio.CancelScope] = []
        keeper.attach(
            self, Listener(self._mark_lost, self._mark_at_risk, self._mark_closed, self._held)
        )

    def __repr__(self) -> str:
        state = "lost" if self.lost else "released" if self.released else "held"
        return f"<Lease {self.name!r} token={self.token} {state}>"

    def _portal(self) -> LoopThread:
        assert self._keeper.portal is not None
        return self._keeper.portal

    @property
    def deadline(self) -> float:
        """Local monotonic time (see ``tenure.Clock``) after which the holder must not act."""
        return self._keeper.state.deadline

    @property
    def clock(self) -> Clock:
        """The monotonic clock that ``deadline`` and ``stop_by`` are read on."""
        return self._keeper.clock

    @property
    def stop_by(self) -> float:
        """The local monotonic time by which work under this lease must be done: its deadline,
        which comes before the store could grant the lock to anyone else (rule 3)."""
        return self._keeper.state.deadline

    @property
    def at_risk(self) -> bool:
        """True while renewals are overdue (or once lost): stop taking new work, and be done
        by ``stop_by``. A renewal confirmed later makes it False again."""
        if self.released:
            return False
        return self.lost or self._keeper.state.at_risk(self._keeper.clock.now())

    @property
    def loss(self) -> Loss | None:
        """Why the lease was lost (None while held, or once released)."""
        if not self.lost:
            return None
        return self._loss or self._keeper.state.loss or Loss.ERROR

    @property
    def lost(self) -> bool:
        """True once the lease is lost; reads the clock, so it is never late."""
        if self._lost_reason is None and not self.released and self._keeper.expired():
            return True
        return self._lost_reason is not None

    @property
    def lost_reason(self) -> str | None:
        """Why the lease was lost, in words (None while held)."""
        return self._lost_reason or (self._keeper.state.lost_reason if self.lost else None)

    def remaining(self) -> float:
        """Seconds left before the deadline (0 once lost or released)."""
        if self.lost or self.released:
            return 0.0
        return max(0.0, self.deadline - self._keeper.clock.now())

    def check(self) -> None:
        """Raise ``LeaseLost`` unless the lease is still held and before its deadline."""
        if self.lost:
            raise self.lost_error()
        if self.released:
            raise LeaseLost(f"lease on {self.name!r} (token {self.token}) was released")

    def lost_error(self) -> LeaseLost:
        """The error that says this lease was lost, and why."""
        return LeaseLost(f"lease on {self.name!r} (token {self.token}) lost: {self.lost_reason}")

    def cancel_on_loss(self, scope: anyio.CancelScope) -> None:
        """Cancel ``scope`` when the lease is lost (at once if it already is)."""
        self._scopes.append(scope)
        if self._lost_reason is not None:
            scope.cancel()

    def on_lost(self, callback: LostCallback) -> None:
        """Call ``callback(lease)`` once when the lease is lost (at once if it already is).

        Callbacks run on the client's event loop: keep them short and non-blocking.
        """
        if self._lost_reason is not None:
            callback(self)
        else:
            self._callbacks.append(callback)

    def on_at_risk(self, callback: LostCallback) -> None:
        """Call ``callback(lease)`` each time renewals become overdue (at once if they are now),
        before the lease could be lost. Runs on the client's event loop: keep it short."""
        self._at_risk_callbacks.append(callback)
        if self.at_risk and not self.released:
            callback(self)

    def _mark_at_risk(self) -> None:
        if self.released or self._lost_reason is not None:
            return
        for callback in list(self._at_risk_callbacks):
            callback(self)

    def _mark_lost(self, reason: str, loss: Loss) -> None:
        if self._lost_reason is not None or self.released:
            return
        self._lost_reason, self._loss = reason, loss
        for scope in self._scopes:
            scope.cancel()
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    def _mark_closed(self) -> None:
        self.released = True

    async def _release(self) -> None:
        """Release the lock if this lease still holds it. A no-op once lost or released."""
        if self.released:
            return
        self.released = True
        lost = self._lost_reason is not None  # marked lost: nothing left to delete
        self._callbacks.clear()
        self._at_risk_callbacks.clear()
        revoked = self._loss is Loss.REVOKED
        await self._keeper.release(self, *self._held, lost, revoked)

    release = io(_release)

    async def _give_back(self) -> None:
        await self._release()

    async def _set_value(self, value: str) -> bool:
        """Set the value the store shows with this grant (``LockInfo.value``): a leader's, or a
        permit's count. False if the store says the grant is over."""
        elections = elections_of(self._keeper.store)
        return await elections.proclaim(self._keeper.handle, *self._held, value)

    async def _write_held(self, key: str, value: str | None) -> None:
        """Write a record of this grant's state (None: delete it) while the grant is current,
        by the store's own compare; ``LeaseLost`` (and the lease is lost) if it is not."""
        self.check()
        records = records_of(self._keeper.store)
        if not await records.write_held_record(self._keeper.handle, *self._held, key, value):
            self._mark_lost(
                "the store refused a state write: the grant is no longer current", Loss.GONE
            )
            self.check()

    def holds(self, name: str) -> bool:
        """True if the lock the store holds for this grant is ``name``."""
        return self._held[0] == name

    def same_session(self, other: LeaseBase) -> bool:
        """True if both grants are held by one session (so they are lost together)."""
        return self._keeper is other._keeper


class AsyncLease(LeaseBase, Async):
    """A lease of the async API: ``await lease.release()``."""

    @property
    def state(self) -> AsyncLockState:
        """The state that travels with the lock (docs/state.md): ``await state.get(key)``,
        ``items()``, and ``put(key, value)`` / ``delete(key)`` while this grant is current."""
        return AsyncLockState(self, records_of(self._keeper.store), self._held[0])


class Lease(LeaseBase, Blocking):
    """A lease of the sync API: ``lease.release()``; callbacks run on the client's loop thread."""

    @property
    def state(self) -> LockState:
        """The state that travels with the lock (docs/state.md): ``state.get(key)``,
        ``items()``, and ``put(key, value)`` / ``delete(key)`` while this grant is current."""
        return LockState(self, records_of(self._keeper.store), self._held[0])


def end_of_hold(lease: LeaseBase, exc: BaseException | None) -> LeaseLost | None:
    """What leaving a ``with``/``async with`` block on ``lease`` raises after the release: the
    loss, unless the block already raised something of its own (``exc``). Read before the
    release (which makes a lease no longer lost but released)."""
    return lease.lost_error() if lease.lost and exc is None else None
