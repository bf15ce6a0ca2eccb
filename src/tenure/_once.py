"""Run each slot of a job once: an idempotency record per (job, slot) next to a lock.

Written once for every store that keeps records (``Store.read_record`` / ``write_record``, a
conditional write on the record's version). The record says what became of the slot::

    running  — claimed by a runner (its token, host, pid, attempt, start time)
    done     — the runner recorded completion with exit code 0
    failed   — it recorded a non-zero exit code or an error, or (at-most-once) it died first

A runner first holds the slot's lock, then re-reads the record and writes "running" at the
version it read; completion is written at the version of its own "running" write. So a late
completion from a runner whose slot was claimed again (after its lease was lost) is refused:
the version moved on. A runner that knows its lease is lost does not record at all.

Delivery: at-least-once (the default) re-runs a slot found "running" — its runner died or lost
its lease before recording completion, since the new claimant holds the lock now — as attempt
n+1. At-most-once never starts a slot twice: a claimant that finds it "running" marks it failed.

Idempotency keys (``tenure._idempotent``) are this same machinery with another kind of record:
a subclass of `SlotRecord` says where its records and locks are (``record_prefix``,
``lock_prefix``), when a record is over (`SlotRecord.over`: a stored result that has expired is
not) and which claims it refuses (`SlotRecord.admit`: another request's fingerprint).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, TypeVar
from urllib.parse import quote, unquote

import anyio

from . import _observe
from ._arguments import check_arguments
from ._decorators import Skipped, not_run, slot_of
from ._errors import InvalidArgument, LeaseLost, NotAcquired, StaleToken, TenureError
from ._handles import AsyncHandle, Handle, SyncHandle
from ._lease import AsyncLease, Lease, LeaseBase
from ._lock import acquire
from ._modes import Async, Blocking, io
from ._names import MAX_NAME_BYTES, check_name, reserve
from ._state import DEFAULT_TTL
from ._values import Holder, Record
from .stores._spi import Records, Store, records_of

if TYPE_CHECKING:
    from ._loop_thread import LoopThread
    from ._pool import SessionPool

Policy = Literal["at-least-once", "at-most-once"]
POLICIES: tuple[Policy, ...] = ("at-least-once", "at-most-once")
SlotState = Literal["running", "done", "failed"]
LOCK_PREFIX = "once:"
reserve(LOCK_PREFIX, "once", "once-per-slot jobs")
FINAL = ("done", "failed")
NO_FIELDS: Mapping[str, Any] = {}


@dataclass(frozen=True)
class SlotRecord:
    """What the store records of one slot of a job."""

    record_prefix: ClassVar[str] = ""
    """Where this kind of record's keys start among the store's records (a slot's: anywhere,
    its job percent-encoded; another kind's: a prefix with a colon no slot key has)."""
    lock_prefix: ClassVar[str] = LOCK_PREFIX
    """Where the locks of this kind of record's runners are among the lock names."""

    job: str
    slot: str
    state: SlotState
    attempts: int
    token: int
    """The fencing token of the attempt that wrote the record last."""
    host: str
    pid: int
    label: str
    started: float
    """Wall-clock time (seconds since the epoch) the last attempt started, on its runner."""
    ended: float | None = None
    exit_code: int | None = None
    error: str | None = None
    policy: Policy = "at-least-once"

    @property
    def server(self) -> str:
        """``host pid N`` of the runner that wrote the record last."""
        return f"{self.host} pid {self.pid}"

    @property
    def lock(self) -> str:
        """The name of the lock a runner of this slot holds while it runs: a slot ``running``
        whose lock nobody holds has no live runner (it died, or lost its lease)."""
        return type(self).lock_of(self.job, self.slot)

    @property
    def duration(self) -> float | None:
        """Seconds the last attempt ran (None while it runs)."""
        return None if self.ended is None else max(0.0, self.ended - self.started)

    def to_json(self) -> str:
        """The record's text, as the store keeps it."""
        fields = asdict(self)
        del fields["job"], fields["slot"]
        return json.dumps(fields, sort_keys=True)

    @classmethod
    def from_record(cls, record: Record) -> SlotRecord:
        """The slot record a store record holds (``InvalidArgument`` if not written by tenure)."""
        job, slot = split_key(record.key.removeprefix(cls.record_prefix))
        try:
            return cls(job=job, slot=slot, **json.loads(record.value))
        except (ValueError, TypeError) as exc:
            raise InvalidArgument(
                f"record {record.key!r} was not written by tenure: {exc}"
            ) from None

    @classmethod
    def key_of(cls, job: str, slot: str) -> str:
        """``<prefix><job, percent-encoded>/<slot>``: no job's records fall under another
        job's prefix."""
        check_name(job)
        check_slot(slot)
        key = f"{quote(job, safe='')}/{slot}"
        if len(key.encode()) + len(cls.lock_prefix) > MAX_NAME_BYTES:
            raise InvalidArgument(f"job name and slot key are too long together: {key[:40]!r}…")
        return cls.record_prefix + key

    @classmethod
    def lock_of(cls, job: str, slot: str) -> str:
        """The lock a runner of the slot holds: the record's key under ``lock_prefix``."""
        return cls.lock_prefix + cls.key_of(job, slot)[len(cls.record_prefix) :]

    def over(self) -> bool:
        """Whether the slot needs no runner any more: it is done or failed."""
        return self.state in FINAL

    def admit(self, fields: Mapping[str, Any]) -> None:
        """Refuse (raise) a claim that asks with ``fields`` for something other than what this
        record was made for; a slot's claim asks for nothing more."""


def record_key(job: str, slot: str) -> str:
    """A slot's record key: ``<job, percent-encoded>/<slot>``."""
    return SlotRecord.key_of(job, slot)


def is_slot_key(key: str) -> bool:
    """Whether ``key`` is a slot's record (not ``lease.state``'s, an idempotency key's...):
    the others' keys have a colon before their first slash, a slot's job is percent-encoded."""
    return ":" not in key.partition("/")[0]


def job_prefix(job: str) -> str:
    check_name(job)
    return f"{quote(job, safe='')}/"


def split_key(key: str) -> tuple[str, str]:
    job, _, slot = key.partition("/")
    return unquote(job), slot


def check_slot(slot: object) -> str:
    """A slot key: printable, no surrounding whitespace, at most 200 bytes."""
    if not isinstance(slot, str) or not slot:
        raise InvalidArgument(f"slot key must be a non-empty string, got {slot!r}")
    if not slot.isprintable() or slot != slot.strip() or len(slot.encode()) > 200:
        raise InvalidArgument(
            f"slot key must be printable, without surrounding spaces, at most 200 bytes: {slot!r}"
        )
    return slot


def check_policy(policy: object) -> Policy:
    if policy not in POLICIES:
        raise InvalidArgument(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    return policy


L = TypeVar("L", bound=LeaseBase)


class ClaimCore(Generic[L]):
    """What every claim of a record has (a slot's `ClaimBase`, an idempotency key's): its
    state, record and lease; recording an end at the version of its own claim; abandoning it."""

    lease_class: type[L]
    record_class: ClassVar[type[SlotRecord]] = SlotRecord

    def __init__(
        self,
        portal: LoopThread | None,
        records: Records,
        key: str,
        state: Literal["claimed", "running", "done", "failed"],
        record: SlotRecord | None,
        lease: L | None = None,
        version: int = 0,
    ) -> None:
        self._portal_thread = portal
        self._records = records
        self._key = key
        self.state = state
        self.record = record
        self.lease = lease
        """The slot's lease while this process runs it (None if it is not to run here)."""
        self._version = version

    def __bool__(self) -> bool:
        return self.state == "claimed"

    def __repr__(self) -> str:
        where = f" {self.record.job!r}/{self.record.slot!r}" if self.record else ""
        return f"<Claim{where} {self.state}>"

    def _portal(self) -> LoopThread:
        assert self._portal_thread is not None
        return self._portal_thread

    @property
    def token(self) -> int:
        """The fencing token of this attempt (0 if none)."""
        return self.record.token if self.record else 0

    @property
    def attempt(self) -> int:
        """Which attempt at the slot this is, from 1 (0 if none)."""
        return self.record.attempts if self.record else 0

    async def _end(self, state: SlotState, ended: float, **fields: Any) -> SlotRecord:
        """Record the end ``state`` at wall-clock time ``ended``, with ``fields`` of the record
        set, at the version of this claim's own write; release the lock (see `complete`)."""
        if self.state != "claimed" or self.record is None or self.lease is None:
            raise InvalidArgument(f"this slot was not claimed here ({self.state})")
        lease, self.state = self.lease, state
        try:
            lease.check()
            end = replace(self.record, state=state, ended=ended, **fields)
            written = await self._records.write_record(self._key, end.to_json(), self._version)
            if written is None:
                now = await self._records.read_record(self._key)
                highest = self.record_class.from_record(now).token if now else self.record.token
                raise StaleToken(
                    f"{self.record.job}/{self.record.slot}", self.record.token, highest
                )
            self.record = end
            if _observe.listeners:
                _observe.slot(end.job, f"ended-{end.state}")
            return end
        finally:
            await lease._release()

    async def _abandon(self) -> None:
        """Release the lock without recording an end: at-least-once runs the slot again."""
        if self.lease is not None:
            await self.lease._release()

    abandon = io(_abandon)

    async def _give_back(self) -> None:
        await self._abandon()


class ClaimBase(ClaimCore[L]):
    """The outcome of asking to run a slot. True (``claimed``) if this process is to run it: then
    ``lease`` is held, ``token`` and ``attempt`` are set, and ``complete`` records the end.
    Otherwise ``state`` says why not: ``done`` or ``failed`` (the slot is over) or ``running``
    (another runner holds it), and ``record`` is the slot's record (None if there is none yet)."""

    async def _complete(self, exit_code: int = 0, error: str | None = None) -> SlotRecord:
        """Record the end of this attempt (``done`` if ``exit_code`` is 0 and there is no
        ``error``, else ``failed``) and release the slot's lock.

        Raises ``LeaseLost`` (nothing recorded) if the lease was lost, and ``StaleToken`` if the
        record was claimed again since (the write is refused: the version moved on)."""
        state: SlotState = "done" if exit_code == 0 and error is None else "failed"
        return await self._end(state, time.time(), exit_code=exit_code, error=error)

    complete = io(_complete)


class AsyncClaim(ClaimBase[AsyncLease], Async):
    """A claim of the async API: ``await claim.complete()``."""

    lease_class = AsyncLease


class Claim(ClaimBase[Lease], Blocking):
    """A claim of the sync API: ``claim.complete()``."""

    lease_class = Lease


C = TypeVar("C", bound=ClaimBase[Any])
K = TypeVar("K", bound=ClaimCore[Any])


async def claim(
    pool: SessionPool,
    job: str,
    slot: str,
    *,
    ttl: float,
    policy: Policy,
    wait: bool,
    timeout: float | None,
    make: type[K],
    fields: Mapping[str, Any] = NO_FIELDS,
) -> K:
    """Hold the slot's lock, then claim the slot's record if it is not over (see module doc);
    ``fields``: what the claim asks for besides the slot, written into its record."""
    kind = make.record_class
    key = kind.key_of(job, slot)
    check_policy(policy)
    store = records_of(pool.store)
    lock = kind.lock_of(job, slot)
    timeout = check_arguments(lock, ttl, timeout, pool.drift, pool.margin)
    found = await store.read_record(key)
    seen = kind.from_record(found) if found else None
    claim = functools.partial(make, pool.portal, store, key)
    if seen is not None:
        seen.admit(fields)
        if seen.over():  # no lock needed
            return claim(seen.state, seen)
    try:
        lease: LeaseBase = await acquire(
            pool, lock, ttl, wait=wait, timeout=timeout, on_wait=None, make=make.lease_class
        )
    except NotAcquired:
        now = await store.read_record(key)
        current = kind.from_record(now) if now else None
        return claim(current.state if current and current.over() else "running", current)
    try:
        return await _claim_held(
            store, pool.holder, key, job, slot, lease, policy, claim, kind, fields
        )
    except BaseException:
        await lease._release()
        raise


async def _claim_held(
    store: Records,
    owner: Holder,
    key: str,
    job: str,
    slot: str,
    lease: LeaseBase,
    policy: Policy,
    claim: Callable[..., K],
    kind: type[SlotRecord],
    fields: Mapping[str, Any],
) -> K:
    found = await store.read_record(key)
    before = kind.from_record(found) if found else None
    version = found.version if found else 0
    if before is not None:
        before.admit(fields)  # raises: the lock is released by the caller
        if before.over():
            await lease._release()
            return claim(before.state, before)
    if before is not None and policy == "at-most-once":
        # Its runner lost the lock without recording an end: it may have done part of the work.
        failed = replace(
            before,
            state="failed",
            ended=time.time(),
            error=f"attempt {before.attempts} on {before.server} ended without recording an end",
            policy=policy,
        )
        written = await store.write_record(key, failed.to_json(), version)
        await lease._release()
        if written is None:
            raise LeaseLost(f"slot {job}/{slot}: the record changed while this process held it")
        return claim("failed", failed)
    lease.check()
    mine = kind(
        job=job,
        slot=slot,
        state="running",
        attempts=(before.attempts if before else 0) + 1,
        token=lease.token,
        host=owner.host or socket.gethostname(),
        pid=owner.pid or os.getpid(),
        label=owner.label,
        started=time.time(),
        policy=policy,
        **fields,
    )
    written = await store.write_record(key, mine.to_json(), version)
    if written is None:
        raise LeaseLost(f"slot {job}/{slot}: the record changed while this process held it")
    return claim("claimed", mine, lease, written.version)


async def history(store: Store, job: str | None) -> list[SlotRecord]:
    """Every recorded slot of ``job`` (None: of every job), in record-key order."""
    found = await records_of(store).list_records("" if job is None else job_prefix(job))
    return [SlotRecord.from_record(r) for r in found if is_slot_key(r.key)]


async def jobs(store: Store) -> list[str]:
    """The jobs that have at least one recorded slot, sorted by name."""
    found = await records_of(store).list_records("")
    return sorted({split_key(r.key)[0] for r in found if is_slot_key(r.key)})


class ClaimHandle(Handle[K]):
    """What a handle whose grant is a claim has (a slot's, an idempotency key's): a falsy
    claim holds no lease, and giving one back abandons it."""

    given_as = "claim"

    def lease_of(self, grant: K) -> LeaseBase | None:
        return grant.lease if grant else None

    def _over(self, grant: K) -> bool:
        return not grant or grant.lease is None or grant.lease.released or grant.lease.lost

    async def _hand_back(self, grant: K) -> None:
        await grant._abandon()


class OnceHandle(ClaimHandle[C]):
    """A job's slot, run once: by one runner of many, and not again once it is over."""

    kind = "once"
    _claim: type[C]

    def __init__(
        self,
        pool: SessionPool,
        job: str,
        slot: str | Callable[[], str],
        ttl: float = DEFAULT_TTL,
        *,
        policy: Policy = "at-least-once",
        wait: bool = False,
        timeout: float | None = None,
    ) -> None:
        """Slot ``slot`` of ``job`` (a key, or a function of no arguments giving it at each
        ``acquire``: today's date, say). ``acquire()`` claims it — a falsy `Claim` if it is
        over or (without ``wait``) running elsewhere; ``policy``: ``at-least-once`` runs a slot
        whose runner died again, ``at-most-once`` marks it failed. A block records done (or
        failed, with the body's exception) when it is left."""
        check_arguments(job, ttl, timeout, pool.drift, pool.margin)
        check_policy(policy)
        self._slot_of = slot_of(slot)
        if isinstance(slot, str):
            record_key(job, slot)
        super().__init__(pool, job, wait=wait, timeout=timeout)
        self.job = job
        self.ttl = float(ttl)
        self.policy: Policy = policy
        self._key = ""

    async def _take(self, wait: bool, timeout: float | None) -> C:
        self._key = check_slot(self._slot_of())
        taken = await claim(
            self._pool, self.job, self._key, ttl=self.ttl, policy=self.policy, wait=wait,
            timeout=timeout, make=self._claim,
        )  # fmt: skip
        if _observe.listeners:
            _observe.slot(self.job, taken.state)
        return taken

    async def _leave_block(self, grant: C, exc: BaseException | None) -> None:
        if not grant:
            return
        if exc is None:
            await grant._complete()  # LeaseLost if the loss cancelled the body: nothing recorded
            return
        with anyio.CancelScope(shield=True), contextlib.suppress(TenureError):
            await grant._complete(error=one_line(exc))  # the body's own exception says more

    def _skipped(self, grant: C) -> Skipped | None:
        return None if grant else not_run(self.job, self._key, grant.state, grant.record)


class AsyncOnce(OnceHandle[AsyncClaim], AsyncHandle[AsyncClaim]):
    """``async with client.once(job, slot) as claim: if claim: ...``."""

    _claim = AsyncClaim


class Once(OnceHandle[Claim], SyncHandle[Claim]):
    """``with client.once(job, slot) as claim: if claim: ...``."""

    _claim = Claim


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:500] if text else type(exc).__name__
