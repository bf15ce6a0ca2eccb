"""Handles: the object a client makes for one primitive, with the same verbs on every kind.

``handle.acquire()`` (waiting, with a timeout, or not at all) returns a grant; ``release()``
gives it back; ``with handle as grant`` / ``async with`` holds one for a block (an async body is
cancelled when the grant's lease is lost; leaving a block whose lease was lost raises
``LeaseLost``); ``@handle`` on a function holds one for each call, or returns a falsy
`tenure.Skipped` when the call is not to run here. A handle holds at most one grant at a time
(make another handle for another); each decorated call takes its own.

A primitive is a subclass of `Handle` that says how to take its grant (`Handle._take`), how to
give it back and what leaving a block does; `SyncHandle` and `AsyncHandle` add the blocks and
the decorator of each kind, once for every primitive.
"""

from __future__ import annotations

import copy
import functools
import sys
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import anyio

from . import _observe
from ._arguments import check_timeout
from ._decorators import P, R, Skipped, check_kind, giving
from ._errors import InvalidArgument, NotAcquired, StoreUnavailable
from ._lease import LeaseBase, end_of_hold
from ._modes import Async, Blocking, io

if TYPE_CHECKING:
    from ._loop_thread import LoopThread
    from ._pool import SessionPool

G = TypeVar("G")


class Handle(Generic[G]):
    """What every handle has: a name, its defaults for waiting, and the verbs."""

    given_as: ClassVar[str] = "lease"
    """The parameter by which a decorated function that declares it is given the grant."""
    kind: ClassVar[str] = "lock"
    """The kind of primitive, as observers label it (lock, semaphore, rwlock, election…)."""

    def __init__(self, pool: SessionPool, name: str, *, wait: bool, timeout: float | None) -> None:
        if not isinstance(wait, bool):
            raise InvalidArgument(f"wait must be True or False, got {wait!r}")
        self._pool = pool
        self.name = name
        self.wait = wait
        """Whether `acquire` waits its turn by default."""
        self.timeout = check_timeout(timeout)
        """How long `acquire` waits by default (None: as long as it takes)."""
        self._grant: G | None = None
        self._scope: anyio.CancelScope | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    def _portal(self) -> LoopThread:
        assert self._pool.portal is not None
        return self._pool.portal

    # -- what a primitive says ------------------------------------------------------------

    async def _take(self, wait: bool, timeout: float | None) -> G:
        """Take a grant (``NotAcquired`` if ``wait`` is False and it is not free, or after
        ``timeout`` seconds)."""
        raise NotImplementedError

    async def _hand_back(self, grant: G) -> None:
        """Give ``grant`` back (a no-op once it is over)."""
        await self.lease_of(grant)._release()  # type: ignore[union-attr]

    def lease_of(self, grant: G) -> LeaseBase | None:
        """The lease whose loss ends ``grant`` (None: a grant without one)."""
        return grant if isinstance(grant, LeaseBase) else None

    def _over(self, grant: G) -> bool:
        lease = self.lease_of(grant)
        return lease is None or lease.released or lease.lost

    async def _leave_block(self, grant: G, exc: BaseException | None) -> None:
        """Leaving a block on ``grant`` (``exc``: the body's exception): give it back, and
        raise ``LeaseLost`` if it was lost and the body raised nothing of its own."""
        lease = self.lease_of(grant)
        error = end_of_hold(lease, exc) if lease is not None else None
        await self._hand_back(grant)
        if error is not None:
            raise error from None

    def _skipped(self, grant: G) -> Skipped | None:
        """The `Skipped` of a decorated call whose grant says it is not to run (None: run)."""
        return None

    # -- the verbs --------------------------------------------------------------------------

    async def _acquire(self, *, wait: bool | None = None, timeout: float | None = None) -> G:
        """Take a grant and return it: wait for it (``wait``, ``timeout``: the handle's unless
        given) or, with ``wait=False``, take it only if it is free now. ``NotAcquired`` if not."""
        if self._grant is not None and not self._over(self._grant):
            raise InvalidArgument(
                f"this handle of {self.name!r} holds a grant already: release it, or make"
                " another handle"
            )
        if wait is not None and not isinstance(wait, bool):
            raise InvalidArgument(f"wait must be True or False, got {wait!r}")
        timeout = self.timeout if timeout is None else check_timeout(timeout)
        wait = self.wait if wait is None else wait
        if not _observe.listeners:
            self._grant = grant = await self._take(wait, timeout)
            return grant
        clock, store = self._pool.clock, self._pool.store
        started = clock.now()
        outcome: _observe.Outcome | None = None  # None: cancelled, which is not told
        try:
            self._grant = grant = await self._take(wait, timeout)
            outcome = "granted" if grant else "not-acquired"  # a falsy claim: not to run here
        except NotAcquired:
            outcome = "timeout" if wait else "not-acquired"
            raise
        except Exception as exc:
            outcome = "error"
            if isinstance(exc, StoreUnavailable):
                _observe.store_error(store, "acquire", "unavailable")
            raise
        finally:
            if outcome is not None:
                _observe.acquired(self.kind, store, self.name, outcome, clock.now() - started)
        return grant

    acquire = io(_acquire)

    async def _release(self) -> None:
        """Give back the grant this handle holds (a no-op if it holds none, or it is over)."""
        grant, self._grant = self._grant, None
        if grant is not None:
            await self._hand_back(grant)

    release = io(_release)

    def _fresh(self: HandleT) -> HandleT:
        """A copy holding nothing: each decorated call takes its own grant."""
        twin = copy.copy(self)
        twin._grant, twin._scope = None, None
        return twin


HandleT = TypeVar("HandleT", bound=Handle[Any])


class SyncHandle(Handle[G], Blocking):
    """The blocking kind's block and decorator."""

    def __enter__(self) -> G:
        return self._run(self._acquire)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        grant, self._grant = self._grant, None
        if grant is not None:
            self._run(self._leave_block, grant, exc)

    def __call__(self, func: Callable[P, R]) -> Callable[P, R | Skipped]:
        """``@handle`` on a function: each call runs it holding a grant of its own (given to
        a parameter named as `Handle.given_as`), or returns a `Skipped`. A sync function cannot
        be interrupted: a grant lost while it ran raises ``LeaseLost`` when it returns."""
        check_kind(func, want_async=False, decorator=type(self).__name__)
        hand = giving(func, self.given_as)

        @functools.wraps(func)
        def call(*args: P.args, **kwargs: P.kwargs) -> R | Skipped:
            handle = self._fresh()
            try:
                grant = handle.__enter__()
            except NotAcquired as exc:
                return Skipped(self.name, "held", lock=exc.lock)
            skipped = handle._skipped(grant)
            if skipped is not None:
                handle.__exit__(None, None, None)
                return skipped
            try:
                result = func(*args, **kwargs, **hand(grant))
            except BaseException:
                handle.__exit__(*sys.exc_info())
                raise
            handle.__exit__(None, None, None)
            return result

        return call


class AsyncHandle(Handle[G], Async):
    """The async kind's block and decorator: a lost lease cancels the body."""

    async def __aenter__(self) -> G:
        grant = await self._acquire()
        lease = self.lease_of(grant)
        if lease is not None:
            self._scope = anyio.CancelScope()
            self._scope.__enter__()
            lease.cancel_on_loss(self._scope)
        return grant

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        grant, scope = self._grant, self._scope
        self._grant, self._scope = None, None
        swallowed = bool(scope.__exit__(exc_type, exc, tb)) if scope is not None else False
        if grant is not None:
            await self._leave_block(grant, None if swallowed else exc)
        return swallowed

    def __call__(self, func: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R | Skipped]]:
        """``@handle`` on a coroutine function: each call runs it holding a grant of its own
        (cancelled if its lease is lost), or returns a `Skipped`."""
        check_kind(func, want_async=True, decorator=type(self).__name__)
        hand = giving(func, self.given_as)

        @functools.wraps(func)
        async def call(*args: P.args, **kwargs: P.kwargs) -> R | Skipped:
            handle = self._fresh()
            try:
                grant = await handle.__aenter__()
            except NotAcquired as exc:
                return Skipped(self.name, "held", lock=exc.lock)
            skipped = handle._skipped(grant)
            if skipped is not None:
                await handle.__aexit__(None, None, None)
                return skipped
            try:
                result = await func(*args, **kwargs, **hand(grant))
            except BaseException:
                if not await handle.__aexit__(*sys.exc_info()):
                    raise
                raise  # a cancel scope of the handle's took it: the loss surfaces at exit
            await handle.__aexit__(None, None, None)
            return result

        return call
