"""What the decorator form of every handle shares (``@client.lock(name, wait=False)``,
``@client.once(job, slot=…)``, ...): sync functions go with the sync client, coroutine
functions with the async one.

A call that does not run here returns a `Skipped` — falsy, saying why (the lock was held,
the slot was over or running elsewhere) — instead of raising: on a group of servers that all
call the function, not running is the normal outcome on all but one. A function that declares
a parameter named as the handle's grant (``lease``, ``permit``, ``leadership``, ``claim``,
``member``) is given it, for its token. In async code a lost lease cancels the function (as
``async with``); sync code cannot be interrupted, so the call raises ``LeaseLost`` when it
returns, and the function should check ``lease.check()`` (or fence with ``lease.token``) before
each write.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar

from ._errors import InvalidArgument
from ._values import LockInfo

if TYPE_CHECKING:
    from ._once import SlotRecord

SkipReason = Literal["held", "running", "done", "failed"]
P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Skipped:
    """A decorated call that did not run here: ``held`` (another holds the lock), or the slot
    is ``running`` elsewhere, ``done`` or ``failed`` already. Always false."""

    name: str
    """The lock's name, or ``job/slot``."""
    reason: SkipReason
    lock: LockInfo | None = None
    """The lock as the store saw it (``held``: its ``holder``), if it said."""
    record: SlotRecord | None = None
    """The slot's record (``running``, ``done``, ``failed``), if there is one."""

    def __bool__(self) -> bool:
        return False

    def __str__(self) -> str:
        if self.reason == "held":
            holder = self.lock.holder if self.lock else None
            who = f" by {holder.label or holder.host}" if holder else ""
            return f"{self.name}: not run here, the lock is held{who}"
        if self.reason == "running":
            return f"{self.name}: not run here, it is running elsewhere"
        return f"{self.name}: not run here, the slot is {self.reason} already"


def check_kind(func: object, want_async: bool, decorator: str) -> Callable[..., Any]:
    """``func`` is a function of the kind this client runs (sync or coroutine)."""
    if not callable(func):
        raise InvalidArgument(f"{decorator} decorates a function, got {func!r}")
    is_async = inspect.iscoroutinefunction(func)
    what = getattr(func, "__qualname__", repr(func))
    if is_async and not want_async:
        raise InvalidArgument(
            f"{decorator}: {what} is a coroutine function: decorate it with the"
            " async client's (tenure.connect_async)"
        )
    if want_async and not is_async:
        raise InvalidArgument(
            f"{decorator}: {what} is not a coroutine function: decorate it with the"
            " sync client's (tenure.connect)"
        )
    return func


def giving(func: Callable[..., Any], param: str) -> Callable[[Any], dict[str, Any]]:
    """The keyword arguments that hand ``value`` to ``func``: ``{param: value}`` if it declares
    a parameter of that name, else none."""
    try:
        accepts = param in inspect.signature(func).parameters
    except (TypeError, ValueError):  # a builtin without a signature: it cannot take one
        accepts = False
    return (lambda value: {param: value}) if accepts else (lambda value: {})


def slot_of(slot: str | Callable[[], str]) -> Callable[[], str]:
    """The slot key of each call: ``slot`` itself, or what the function ``slot`` gives then."""
    if isinstance(slot, str):
        return lambda: slot
    if callable(slot):
        return slot
    raise InvalidArgument(f"slot must be a key or a function giving one, got {slot!r}")


def not_run(job: str, key: str, state: str, record: SlotRecord | None) -> Skipped:
    """The `Skipped` of a slot that was not claimed here."""
    assert state in ("running", "done", "failed"), state
    reason: SkipReason = state  # type: ignore[assignment]
    return Skipped(f"{job}/{key}", reason, record=record)
