"""Idempotency keys over the store's records: charge a card once, however often it is asked.

``client.idempotent(scope, key, fingerprint=...)`` is `tenure.once` (``tenure._once``) with
another kind of record, a `KeyRecord`: the key is the slot, the scope the job. So everything
``once`` guarantees holds, written once:

- the first caller holds the key's lock and writes ``running`` (its token, the request's
  fingerprint) at the version it read; `KeyClaim.complete` stores the result (JSON) at the
  version of its own write, so a late completion of a runner whose key was taken over is
  refused (``StaleToken``), and a runner that knows its lease is lost stores nothing;
- a runner that died (or lost its lease) leaves the key ``running`` with nobody holding its
  lock: the next claimant takes it over as attempt n+1, with a higher token;
- a later claim with the same fingerprint finds it ``done``: a falsy claim whose ``result`` is
  the stored one (a replay: nothing runs); with another fingerprint, `tenure.KeyReused`;
- a stored result is kept ``retention`` seconds after its completion (default one day), then the
  key is free for a new request.

Retention is judged by wall time, on purpose. The liveness of a ``running`` claim is never
judged by a client's clock (its lock's lease is, by the store: rule 2); the retention only
decides how long a replay is answered from the record, usually a day, where a few seconds of
skew between hosts change nothing and no monotonic clock is shared between machines. Records
are not deleted (the store contract has no delete of a record): an expired one is overwritten
by the next claim of its key.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import anyio

from ._arguments import check_arguments
from ._decorators import P, R, Skipped, check_kind, giving, not_run
from ._errors import InvalidArgument, KeyReused
from ._handles import AsyncHandle, SyncHandle
from ._lease import AsyncLease, Lease, LeaseBase
from ._modes import Async, Blocking, io
from ._names import reserve
from ._once import ClaimCore, ClaimHandle, SlotRecord, check_slot, claim
from ._state import DEFAULT_TTL

if TYPE_CHECKING:
    from ._pool import SessionPool

PREFIX = "idempotency:"
"""Where the keys' records and locks are (a colon before the first slash: no slot's key)."""
reserve(PREFIX, "idempotency", "idempotency keys")
DEFAULT_RETENTION = 86400.0
MAX_RESULT_BYTES = 64 * 1024


def fingerprint(*request: object) -> str:
    """A fingerprint of a request: the SHA-256 of its canonical JSON (keys sorted), in hex.
    ``InvalidArgument`` if a part is not JSON-serialisable: fingerprint what identifies the
    request (its body, its parameters), not the objects that carry it."""
    try:
        text = json.dumps(request, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(
            f"cannot fingerprint the request ({exc}): give fingerprint= yourself"
        ) from None
    return hashlib.sha256(text.encode()).hexdigest()


def seconds(what: str, value: object, *, positive: bool) -> float:
    """``value`` as a finite number of seconds, more than 0 (``positive``) or 0 or more."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{what} must be a number of seconds, got {value!r}")
    if not (value > 0 if positive else value >= 0) or value == float("inf"):
        raise InvalidArgument(f"{what} must be {'more than 0' if positive else '0 or more'} s")
    return float(value)


@dataclass(frozen=True)
class KeyRecord(SlotRecord):
    """What the store records of one idempotency key: its ``job`` is the scope and its
    ``slot`` the key; ``fingerprint`` the request it was claimed for; once ``done``, the stored
    ``result`` and when it ``expires``."""

    record_prefix: ClassVar[str] = PREFIX
    lock_prefix: ClassVar[str] = PREFIX

    fingerprint: str = ""
    result: Any = None
    """The stored result (JSON: what ``json.loads`` gives back), once ``done``."""
    expires: float | None = None
    """Wall-clock time (seconds since the epoch) after which the result is no longer replayed."""

    def expired(self) -> bool:
        """Whether the stored result is past its retention (a ``running`` claim never is)."""
        return self.state == "done" and self.expires is not None and self.expires <= time.time()

    def over(self) -> bool:
        """Done, with a result still kept: replay it. Expired: the key is free again."""
        return self.state == "done" and not self.expired()

    def admit(self, fields: Mapping[str, Any]) -> None:
        """Refuse another request's claim of a key in use (``KeyReused``)."""
        asked = fields.get("fingerprint", "")
        if asked != self.fingerprint and not self.expired():
            raise KeyReused(f"{self.job}/{self.slot}", asked, self.fingerprint)


L = TypeVar("L", bound=LeaseBase)


class KeyClaimBase(ClaimCore[L]):
    """The outcome of asking to run an idempotency key. True (``claimed``) if this process is to
    run the request: then ``lease`` is held and ``token`` set, and `complete` stores the result.
    Falsy otherwise: ``done`` (a replay: ``result`` is the stored result) or ``running`` (another
    runner holds the key now, and the claim did not wait)."""

    record_class: ClassVar[type[SlotRecord]] = KeyRecord
    retention: float = DEFAULT_RETENTION

    def __repr__(self) -> str:
        where = f" {self.record.job!r}/{self.record.slot!r}" if self.record else ""
        return f"<KeyClaim{where} {self.state}>"

    @property
    def result(self) -> Any:
        """The stored result: on a replay the first run's, after `complete` this one's (as
        JSON gives it back); None before."""
        return self.record.result if isinstance(self.record, KeyRecord) else None

    async def _complete(self, result: Any = None) -> KeyRecord:
        """Store ``result`` (JSON-serialisable, at most 64 KiB) as the key's answer for
        ``retention`` seconds, and release the key's lock.

        Raises ``LeaseLost`` (nothing stored) if the lease was lost, ``StaleToken`` if the key
        was taken over since (the write is refused: the version moved on), and
        ``InvalidArgument`` if the result is not JSON (nothing stored, the claim is abandoned:
        the next claimant runs the request again)."""
        try:
            text = json.dumps(result, allow_nan=False)
        except (TypeError, ValueError) as exc:
            await self._abandon()
            raise InvalidArgument(f"the result must be JSON-serialisable: {exc}") from None
        if len(text.encode()) > MAX_RESULT_BYTES:
            await self._abandon()
            raise InvalidArgument(f"the result is larger than {MAX_RESULT_BYTES} bytes as JSON")
        now = time.time()
        end = await self._end(
            "done", now, exit_code=0, result=json.loads(text), expires=now + self.retention
        )
        assert isinstance(end, KeyRecord)
        return end

    complete = io(_complete)


class AsyncKeyClaim(KeyClaimBase[AsyncLease], Async):
    """A claim of an idempotency key, async: ``await claim.complete(result)``."""

    lease_class = AsyncLease


class KeyClaim(KeyClaimBase[Lease], Blocking):
    """A claim of an idempotency key, sync: ``claim.complete(result)``."""

    lease_class = Lease


K = TypeVar("K", bound=KeyClaimBase[Any])
H = TypeVar("H", bound="IdempotentHandle[Any]")
Key = str | Callable[..., str]


class IdempotentHandle(ClaimHandle[K]):
    """One idempotency key of a scope: its request runs once, and its result is replayed."""

    kind = "idempotency"
    _claim: type[K]

    def __init__(
        self,
        pool: SessionPool,
        scope: str,
        key: Key,
        *,
        fingerprint: Key | None = None,
        ttl: float = DEFAULT_TTL,
        retention: float = DEFAULT_RETENTION,
        wait: bool = True,
        timeout: float | None = None,
    ) -> None:
        """Key ``key`` of ``scope`` (a string; for the decorator form, a function of the
        decorated function's arguments that gives it). ``fingerprint``: what identifies the
        request (a string, or such a function; the decorator's default is `fingerprint` of the
        call's arguments). ``ttl``: the lease of the runner's claim. ``retention``: seconds a
        stored result is replayed. ``wait`` (default True): a claim that finds the key running
        elsewhere waits for it, then replays its result."""
        check_arguments(scope, ttl, timeout, pool.drift, pool.margin)
        seconds("retention", retention, positive=False)
        if isinstance(key, str):
            KeyRecord.key_of(scope, key)
        elif not callable(key):
            raise InvalidArgument(f"key must be a string or a function giving one, got {key!r}")
        if not (fingerprint is None or isinstance(fingerprint, str) or callable(fingerprint)):
            raise InvalidArgument(
                f"fingerprint must be a string or a function, got {fingerprint!r}"
            )
        super().__init__(pool, scope, wait=wait, timeout=timeout)
        self.scope = scope
        self.key = key
        self.fingerprint = fingerprint
        self.ttl = float(ttl)
        self.retention = float(retention)

    def _for_call(self: H, args: tuple[Any, ...], kwargs: dict[str, Any]) -> H:
        """A handle of the key (and fingerprint) of one call of a decorated function."""
        twin = self._fresh()
        key, fp = self.key, self.fingerprint
        twin.key = key if isinstance(key, str) else check_slot(key(*args, **kwargs))
        if fp is None:
            twin.fingerprint = fingerprint(list(args), kwargs)
        elif not isinstance(fp, str):
            twin.fingerprint = fp(*args, **kwargs)
        return twin

    async def _take(self, wait: bool, timeout: float | None) -> K:
        key, fp = self.key, "" if self.fingerprint is None else self.fingerprint
        if not isinstance(key, str) or not isinstance(fp, str):
            raise InvalidArgument(
                "this handle's key or fingerprint is a function of a decorated function's"
                " arguments: use it as a decorator, or give strings"
            )
        taken = await claim(
            self._pool, self.scope, key, ttl=self.ttl, policy="at-least-once", wait=wait,
            timeout=timeout, make=self._claim, fields={"fingerprint": fp},
        )  # fmt: skip
        taken.retention = self.retention
        return taken

    async def _leave_block(self, grant: K, exc: BaseException | None) -> None:
        """A block left normally stores None unless the body stored a result itself; a body
        that raised stores nothing (the next claimant runs the request again)."""
        if not grant:
            return
        if exc is None:
            await grant._complete()  # LeaseLost if the loss cancelled the body: nothing stored
            return
        with anyio.CancelScope(shield=True):
            await grant._abandon()

    def _outcome(self, grant: K) -> Any:
        """What a decorated call returns when it did not run: the replayed result, or a
        `Skipped` (the key runs elsewhere and the handle does not wait)."""
        if grant.state == "done":
            return grant.result
        return not_run(self.scope, str(self.key), "running", grant.record)


class AsyncIdempotent(IdempotentHandle[AsyncKeyClaim], AsyncHandle[AsyncKeyClaim]):
    """``async with client.idempotent(scope, key, fingerprint=fp) as claim:``; as a decorator,
    ``@client.idempotent(scope, key=lambda order, **_: order["id"])``."""

    _claim = AsyncKeyClaim

    def __call__(self, func: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R | Skipped]]:
        """``@handle`` on a coroutine function: a call whose key is new runs it and stores what
        it returns; a call whose key is done returns the stored result without running it (the
        JSON round trip of the first result: every call returns the same)."""
        check_kind(func, want_async=True, decorator=type(self).__name__)
        hand = giving(func, self.given_as)

        async def call(*args: P.args, **kwargs: P.kwargs) -> Any:
            handle = self._for_call(args, kwargs)
            grant = await handle._acquire()
            if not grant:
                return handle._outcome(grant)
            try:
                result = await func(*args, **kwargs, **hand(grant))
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await grant._abandon()
                raise
            return (await grant._complete(result)).result

        return functools.wraps(func)(call)


class Idempotent(IdempotentHandle[KeyClaim], SyncHandle[KeyClaim]):
    """``with client.idempotent(scope, key, fingerprint=fp) as claim:``; as a decorator,
    ``@client.idempotent(scope, key=lambda order, **_: order["id"])``."""

    _claim = KeyClaim

    def __call__(self, func: Callable[P, R]) -> Callable[P, R | Skipped]:
        """``@handle`` on a function: a call whose key is new runs it and stores what it
        returns; a call whose key is done returns the stored result without running it (the
        JSON round trip of the first result: every call returns the same)."""
        check_kind(func, want_async=False, decorator=type(self).__name__)
        hand = giving(func, self.given_as)

        def call(*args: P.args, **kwargs: P.kwargs) -> Any:
            handle = self._for_call(args, kwargs)
            grant = handle._run(handle._acquire)
            if not grant:
                return handle._outcome(grant)
            try:
                result = func(*args, **kwargs, **hand(grant))
            except BaseException:
                grant.abandon()
                raise
            return grant.complete(result).result

        return functools.wraps(func)(call)
