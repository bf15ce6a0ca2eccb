"""What every store needs and would otherwise write again, once.

- `owner_json` / `parse_owner`: who holds a session, as the JSON a store keeps beside a lock;
- `Unavailable`: the one-line, secret-free ``StoreUnavailable`` of a store, and `Unavailable.on`,
  the context manager that turns a driver's errors into it;
- `patience` and `Backoff`: how long to wait for one answer, and how to wait between tries;
- `InDoubt`: requests whose answer was lost, done again at the next keep-alive;
- `StoreURL`: the skeleton every store URL parser shares (scheme, fragment, hosts, options).
"""

from __future__ import annotations

import json
import random
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import SplitResult, urlsplit

import anyio

from .._errors import InvalidArgument, StoreUnavailable
from .._values import Holder, Revocation
from ._connect import (
    TLS_OPTIONS,
    ConnectOptions,
    parse_hosts,
    redact,
    resolve,
    scrub,
    tls_failure,
)

T = TypeVar("T")

FOREIGN = Holder("?", 0, "not written by tenure")
"""The owner shown for a lock whose data tenure did not write (or cannot read)."""


# -- the owner codec -------------------------------------------------------------------------


def owner_fields(owner: Holder) -> dict[str, object]:
    return {"host": owner.host, "pid": owner.pid, "label": owner.label}


def owner_json(owner: Holder, **more: object) -> str:
    """``owner`` as JSON, with ``more`` fields beside it (a store's own: ttl, value, …)."""
    return json.dumps({**owner_fields(owner), **more})


def owner_of(fields: Mapping[str, Any]) -> Holder:
    """The owner in decoded fields; ``KeyError``/``ValueError``/``TypeError`` if not there."""
    return Holder(str(fields["host"]), int(fields["pid"]), str(fields.get("label", "")))


def parse_owner(data: str | bytes | None) -> tuple[Holder, dict[str, Any]]:
    """The owner and all fields of what `owner_json` wrote; `FOREIGN` and ``{}`` for anything
    else (another program's key, a truncated value)."""
    try:
        fields = json.loads(data or b"")
        return owner_of(fields), fields
    except (ValueError, KeyError, TypeError, AttributeError):
        return FOREIGN, {}


# -- errors ----------------------------------------------------------------------------------


@dataclass
class Unavailable:
    """Makes a store's ``StoreUnavailable``: ``"<where>: <problem>"``, one line, secrets
    replaced by ``***``. ``where`` names the store as its user knows it (the URL, redacted)."""

    where: str
    secrets: Sequence[str] = ()
    timeout: float | None = None
    """What a ``TimeoutError`` means: "no answer within <timeout>s" (None: "no answer")."""

    def __call__(self, problem: object, *, whole: bool = False) -> StoreUnavailable:
        """``whole``: ``problem`` is already secret-free and made by the store from lines this
        kit made (a summary of several servers' errors): kept as it is, not scrubbed nor cut."""
        text = str(problem) if whole else scrub(str(problem), list(self.secrets))
        return StoreUnavailable(f"{self.where}: {text}")

    def of(self, exc: BaseException) -> StoreUnavailable:
        """The error for a driver's exception: a TLS failure by its reason, a timeout as such."""
        if isinstance(exc, StoreUnavailable):
            return exc
        if isinstance(exc, TimeoutError):
            within = f" within {self.timeout:g}s" if self.timeout is not None else ""
            return self(f"no answer{within}")
        return self(tls_failure(exc) or str(exc) or type(exc).__name__)

    @contextmanager
    def on(self, *errors: type[BaseException]) -> Iterator[None]:
        """Turn the driver's ``errors`` raised inside into this store's ``StoreUnavailable``
        (the driver's traceback is dropped: the one line is the message)."""
        try:
            yield
        except StoreUnavailable:
            raise
        except errors as exc:
            raise self.of(exc) from None


# -- patience and back-off -------------------------------------------------------------------


def patience(ttl: float, ceiling: float = 5.0, *, floor: float = 0.25, share: float = 4) -> float:
    """How long to wait for one answer on a session of ``ttl``: a ``share`` of the TTL within
    [floor, ceiling], so a stuck server cannot eat the renewal window and a short TTL still
    gets a real chance."""
    return min(ceiling, max(floor, ttl / share))


@dataclass
class Backoff:
    """Waits that double from ``first`` up to ``most``, with jitter, so that contending clients
    spread out; `reset` after a success."""

    first: float = 0.005
    most: float = 0.5
    jitter: bool = True
    """False: the waits are exactly ``first``, twice that, … (one client pacing its own tries,
    as etcd's fail-over through its members: nobody to spread out from)."""
    _next: float = field(default=0.0, init=False)

    def reset(self) -> None:
        self._next = 0.0

    def delay(self) -> float:
        self._next = min(self.most, self._next * 2 if self._next else self.first)
        return self._next * random.uniform(0.5, 1.0) if self.jitter else self._next

    async def sleep(self) -> None:
        await anyio.sleep(self.delay())


async def retrying(
    call: Callable[[], Awaitable[T]],
    retry_on: Callable[[BaseException], bool],
    backoff: Backoff | None = None,
    deadline: float | None = None,
) -> T:
    """``call()`` again while it raises an error ``retry_on`` accepts, waiting by ``backoff``;
    after ``deadline`` (on ``anyio.current_time``) the last error is raised."""
    backoff = backoff or Backoff()
    while True:
        try:
            return await call()
        except Exception as exc:
            if not retry_on(exc) or (deadline is not None and anyio.current_time() >= deadline):
                raise
        await backoff.sleep()


# -- requests in doubt -----------------------------------------------------------------------


class InDoubt(Generic[T]):
    """Requests whose answer was lost: the store may or may not have done them. Each is done
    again (the redo must be idempotent) at the session's next keep-alive until the store
    answers, so nothing a lost reply left behind outlives a renewal."""

    def __init__(self) -> None:
        self._items: dict[T, None] = {}  # insertion-ordered: redone oldest first

    def add(self, item: T) -> None:
        self._items[item] = None

    def discard(self, item: T) -> None:
        self._items.pop(item, None)

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[T]:
        return iter(list(self._items))

    def __contains__(self, item: object) -> bool:
        return item in self._items

    async def sweep(self, redo: Callable[[T], Awaitable[object]], within: float) -> None:
        """Redo each, all within ``within`` seconds (a keep-alive must not wait long for it);
        what fails or is not reached stays for the next sweep. Never raises
        ``StoreUnavailable``."""
        if not self._items:
            return
        with anyio.move_on_after(within):
            for item in list(self._items):
                try:
                    await redo(item)
                except StoreUnavailable:
                    return
                self._items.pop(item, None)


# -- URLs ------------------------------------------------------------------------------------


@dataclass
class StoreURL:
    """A store URL, split and checked as far as every store checks it. Made by `parse_url`;
    the store then checks its own parts, calling `resolve` for TLS and credentials where its
    checks put it (so the first mistake in the URL is the one reported)."""

    url: str
    store: str
    """The store's name in messages ("etcd", "Redis", …)."""
    usage: str
    """How to write one, shown after each error ("" for none)."""
    parts: SplitResult
    quote: bool = True
    """Messages show the (redacted) URL; False where a password could reach it unredacted."""
    query: list[tuple[str, str]] = field(default_factory=list)
    """After `resolve`: the query's other options, for the store to read (`only`)."""

    @property
    def scheme(self) -> str:
        return self.parts.scheme.lower()

    def bad(self, why: str) -> InvalidArgument:
        """The one-line error for this URL (redacted: a password never shows)."""
        shown = f" {redact(self.url)!r}" if self.quote else ""
        use = f" (use {self.usage})" if self.usage else ""
        return InvalidArgument(f"bad {self.store} store URL{shown}: {why}{use}")

    def hosts(self, default_port: int) -> list[tuple[str, int]]:
        return parse_hosts(self.parts.netloc, default_port, self.bad)

    def resolve(
        self, given: ConnectOptions, *, pairs: bool = False, name: str | None = None
    ) -> ConnectOptions:
        """TLS and credentials: ``given`` (keywords) over the URL's (``_connect.resolve``;
        ``pairs``: user and password come together; ``name``: the store in those messages).
        Keeps the query's other options in `query`."""
        options, self.query = resolve(self.url, name or self.store, given, pairs=pairs)
        return options

    def only(self, *known: str) -> dict[str, str]:
        """The query's other options as a dict; one not in ``known``, or one given twice, is
        refused."""
        found: dict[str, str] = {}
        for option, value in self.query:
            if option not in known:
                names = ", ".join((*known, *TLS_OPTIONS))
                raise self.bad(f"unknown option {option!r} (known: {names})")
            if option in found:
                raise self.bad(f"{option} is given twice")
            found[option] = value
        return found


def parse_url(
    url: str,
    schemes: Sequence[str],
    store: str,
    usage: str,
    *,
    quote: bool = True,
    fragment: str | None = "no fragment allowed",
) -> StoreURL:
    """Split ``url``; refuse a scheme not in ``schemes`` and a fragment (``fragment`` says
    why; None: the store checks it itself, after checks of its own), in one line."""
    checked = StoreURL(url, store, usage, SplitResult("", "", "", "", ""), quote)
    try:
        checked.parts = urlsplit(url)
    except ValueError as exc:
        raise checked.bad(str(exc) if quote else "not a URL") from None
    if checked.scheme not in schemes:
        raise checked.bad(f"the scheme is not {' or '.join(schemes)}")
    if fragment is not None and checked.parts.fragment:
        raise checked.bad(fragment)
    return checked


def revocation_json(revoked: Revocation) -> dict[str, object]:
    """A revocation as JSON fields, for a store to keep (`parse_revocation` reads them)."""
    by = revoked.by
    return {
        "name": revoked.name, "token": revoked.token, "host": by.host, "pid": by.pid,
        "label": by.label, "user": revoked.user, "at": revoked.at, "reason": revoked.reason,
        "now": revoked.now, "free_in": revoked.free_in,
    }  # fmt: skip


def parse_revocation(fields: object) -> Revocation | None:
    """The revocation in JSON fields (`revocation_json`); None if they are not one."""
    if not isinstance(fields, dict):
        return None
    try:
        by = Holder(str(fields["host"]), int(fields["pid"]), str(fields["label"]))
        return Revocation(
            str(fields["name"]), int(fields["token"]), by, str(fields["user"]),
            float(fields["at"]), str(fields["reason"]), bool(fields["now"]),
            float(fields["free_in"]),
        )  # fmt: skip
    except (KeyError, TypeError, ValueError):
        return None
