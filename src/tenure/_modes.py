"""Sync and async from one implementation: the one mechanism that makes the blocking API.

Every object of the API (client, handle, grant) is written once, its I/O as coroutine methods
wrapped by `io` (or `io_iter` for async iterators). It then comes in two classes that differ
only in a marker base: `Async` (the coroutine methods as they are) or `Blocking` (each call runs
on the client's event-loop thread and waits for it). `io` is a descriptor whose ``__get__`` is
overloaded on the marker, so a type checker sees ``lease.release()`` as ``None`` on a
`tenure.Lease` and as a coroutine on a `tenure.AsyncLease`, with the same parameters — nothing
is forwarded or declared twice by hand. Client factories (``client.lock(...)``) are `maker`s:
the handle class of the client's kind.

Code inside tenure never calls the public I/O names (on a blocking object they would wait on
the loop they run on): it awaits the coroutine methods (``_release``, ``_acquire``, ...).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextvars import ContextVar
from types import MethodType
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    ParamSpec,
    Protocol,
    TypeVar,
    cast,
    overload,
)

import anyio

if TYPE_CHECKING:
    from ._loop_thread import LoopThread

_CALLER: ContextVar[tuple[str, int]] = ContextVar("tenure_caller")
"""Who made a blocking call: its thread (the loop's task that runs it is not the caller)."""


def current_caller() -> tuple[str, int]:
    """The caller of the API now: the thread of a blocking call, else the current task. One
    caller that asks for a lock it holds would wait on itself; another caller just waits."""
    return _CALLER.get(None) or ("task", anyio.get_current_task().id)


P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")
T = TypeVar("T")
A = TypeVar("A")


class GivesBack(Protocol):
    """A grant that can be handed back: what a blocking call still got when it was interrupted
    (Ctrl-C) is given back rather than left held by nobody."""

    async def _give_back(self) -> None: ...


async def _give_back(late: object) -> None:
    give_back = getattr(late, "_give_back", None)
    if give_back is not None:
        await give_back()


class Async:
    """The marker of the async kind: I/O methods are coroutine functions."""

    __slots__ = ()


class Blocking:
    """The marker of the blocking kind: I/O runs on the client's event-loop thread."""

    __slots__ = ()

    def _portal(self) -> LoopThread:
        """The event-loop thread of this object's client."""
        raise NotImplementedError

    def _run(self, func: Callable[..., Coroutine[Any, Any, R]], *args: Any, **kwargs: Any) -> R:
        """``await func(*args, **kwargs)`` on the loop, waiting for it; interrupted (Ctrl-C),
        a grant it still made is given back there."""
        portal = self._portal()
        caller = ("thread", threading.get_ident())

        async def as_caller() -> R:
            _CALLER.set(caller)  # in the loop's task that runs the call, for it alone
            return await func(*args, **kwargs)

        def undo(late: object) -> None:
            portal.call(_give_back, late)

        return portal.call(as_caller, on_late=undo)


class io(Generic[S, P, R]):
    """A coroutine method, blocking on a `Blocking` object and awaitable on an `Async` one."""

    def __init__(self, func: Callable[Concatenate[S, P], Coroutine[Any, Any, R]]) -> None:
        self.func = func
        self.__doc__ = func.__doc__
        self.__wrapped__ = func

        def blocking(obj: Blocking, *args: Any, **kwargs: Any) -> R:
            return obj._run(func, obj, *args, **kwargs)

        # Made once: an attribute access only binds it (a method), as it binds ``func``.
        self._blocking = functools.update_wrapper(blocking, func)

    def __set_name__(self, owner: type, name: str) -> None:
        self.__name__ = name

    @overload
    def __get__(self, obj: None, owner: type) -> io[S, P, R]: ...
    @overload
    def __get__(self, obj: Blocking, owner: type) -> Callable[P, R]: ...
    @overload
    def __get__(self, obj: Async, owner: type) -> Callable[P, Coroutine[Any, Any, R]]: ...
    def __get__(self, obj: object, owner: type) -> Any:
        if obj is None:
            return self
        return MethodType(self._blocking if isinstance(obj, Blocking) else self.func, obj)


class io_iter(Generic[S, P, T]):
    """An async-iterator method, a blocking iterator on a `Blocking` object."""

    def __init__(self, func: Callable[Concatenate[S, P], AsyncIterator[T]]) -> None:
        self.func = func
        self.__doc__ = func.__doc__
        self.__wrapped__ = func

        def blocking(obj: Blocking, *args: Any, **kwargs: Any) -> Iterator[T]:
            return _blocking_iter(obj, func(cast(S, obj), *args, **kwargs))

        self._blocking = functools.update_wrapper(blocking, func)

    def __set_name__(self, owner: type, name: str) -> None:
        self.__name__ = name

    @overload
    def __get__(self, obj: None, owner: type) -> io_iter[S, P, T]: ...
    @overload
    def __get__(self, obj: Blocking, owner: type) -> Callable[P, Iterator[T]]: ...
    @overload
    def __get__(self, obj: Async, owner: type) -> Callable[P, AsyncIterator[T]]: ...
    def __get__(self, obj: object, owner: type) -> Any:
        if obj is None:
            return self
        return MethodType(self._blocking if isinstance(obj, Blocking) else self.func, obj)


def _blocking_iter(obj: Blocking, changes: AsyncIterator[T]) -> Iterator[T]:
    """Each item of ``changes``, fetched on the loop; closed there when the caller stops."""
    portal = obj._portal()
    try:
        while True:
            try:
                yield portal.call(changes.__anext__)
            except StopAsyncIteration:
                return
    finally:
        aclose = getattr(changes, "aclose", None)
        if aclose is not None and portal.alive:
            portal.call(aclose)


class maker(Generic[P, S, A]):
    """A client's factory of handles: ``client.lock(...)`` makes a `tenure.Lock` on a sync
    client and a `tenure.AsyncLock` on an async one, from the handle's own constructor (after
    the client's session pool, which it is given)."""

    def __init__(
        self,
        blocking: Callable[Concatenate[Any, P], S],
        asynchronous: Callable[Concatenate[Any, P], A],
    ) -> None:
        self.blocking = blocking
        self.asynchronous = asynchronous
        self.__doc__ = getattr(asynchronous, "__doc__", None)

    @overload
    def __get__(self, obj: None, owner: type) -> maker[P, S, A]: ...
    @overload
    def __get__(self, obj: Blocking, owner: type) -> Callable[P, S]: ...
    @overload
    def __get__(self, obj: Async, owner: type) -> Callable[P, A]: ...
    def __get__(self, obj: object, owner: type) -> Any:
        if obj is None:
            return self
        make = self.blocking if isinstance(obj, Blocking) else self.asynchronous
        return functools.partial(make, obj._pool)  # type: ignore[attr-defined]
