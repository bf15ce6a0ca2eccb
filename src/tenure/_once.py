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
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, replace
from types import TracebackType
from typing import TYPE_CHECKING, Literal
from urllib.parse import quote, unquote

import anyio

from ._errors import InvalidArgument, LeaseLost, NotAcquired, StaleToken, TenureError
from ._lock import acquire, check_arguments
from ._names import MAX_NAME_BYTES, check_name
from ._values import Owner, Record
from .stores._spi import Records, Store, records_of

if TYPE_CHECKING:
    from ._lease import AsyncLease
    from ._pool import SessionPool

Policy = Literal["at-least-once", "at-most-once"]
POLICIES: tuple[Policy, ...] = ("at-least-once", "at-most-once")
SlotState = Literal["running", "done", "failed"]
LOCK_PREFIX = "once:"
FINAL = ("done", "failed")


@dataclass(frozen=True)
class Slot:
    """What the record of one slot of a job says."""

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
        return f"{self.host} pid {self.pid}"

    @property
    def duration(self) -> float | None:
        return None if self.ended is None else max(0.0, self.ended - self.started)

    def to_json(self) -> str:
        fields = asdict(self)
        del fields["job"], fields["slot"]
        return json.dumps(fields, sort_keys=True)

    @classmethod
    def from_record(cls, record: Record) -> Slot:
        job, slot = split_key(record.key)
        try:
            return cls(job=job, slot=slot, **json.loads(record.value))
        except (ValueError, TypeError) as exc:
            raise InvalidArgument(
                f"record {record.key!r} was not written by tenure: {exc}"
            ) from None


def record_key(job: str, slot: str) -> str:
    """``<job, percent-encoded>/<slot>``: no job's records fall under another job's prefix."""
    check_name(job)
    check_slot(slot)
    key = f"{quote(job, safe='')}/{slot}"
    if len(key.encode()) + len(LOCK_PREFIX) > MAX_NAME_BYTES:
        raise InvalidArgument(f"job name and slot key are too long together: {key[:40]!r}…")
    return key


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


class AsyncRun:
    """The outcome of asking to run a slot. True (``claimed``) if this process is to run it: then
    ``lease`` is held, ``token`` and ``attempt`` are set, and ``complete`` records the end.
    Otherwise ``state`` says why not: ``done`` or ``failed`` (the slot is over) or ``running``
    (another runner holds it), and ``slot`` is its record (None if there is none yet)."""

    def __init__(
        self,
        records: Records,
        key: str,
        state: Literal["claimed", "running", "done", "failed"],
        slot: Slot | None,
        lease: AsyncLease | None = None,
        version: int = 0,
    ) -> None:
        self._records = records
        self._key = key
        self.state = state
        self.slot = slot
        self.lease = lease
        self._version = version

    def __bool__(self) -> bool:
        return self.state == "claimed"

    def __repr__(self) -> str:
        where = f" {self.slot.job!r}/{self.slot.slot!r}" if self.slot else ""
        return f"<Run{where} {self.state}>"

    @property
    def token(self) -> int:
        return self.slot.token if self.slot else 0

    @property
    def attempt(self) -> int:
        return self.slot.attempts if self.slot else 0

    async def complete(self, exit_code: int = 0, error: str | None = None) -> Slot:
        """Record the end of this attempt (``done`` if ``exit_code`` is 0 and there is no
        ``error``, else ``failed``) and release the slot's lock.

        Raises ``LeaseLost`` (nothing recorded) if the lease was lost, and ``StaleToken`` if the
        record was claimed again since (the write is refused: the version moved on).
        """
        if self.state != "claimed" or self.slot is None or self.lease is None:
            raise InvalidArgument(f"this slot was not claimed here ({self.state})")
        lease, self.state = self.lease, "done" if exit_code == 0 and error is None else "failed"
        try:
            lease.check()
            end = replace(
                self.slot,
                state=self.state,
                ended=time.time(),
                exit_code=exit_code,
                error=error,
            )
            written = await self._records.write_record(self._key, end.to_json(), self._version)
            if written is None:
                now = await self._records.read_record(self._key)
                highest = Slot.from_record(now).token if now else self.slot.token
                raise StaleToken(f"{self.slot.job}/{self.slot.slot}", self.slot.token, highest)
            self.slot = end
            return end
        finally:
            await lease.release()

    async def abandon(self) -> None:
        """Release the lock without recording an end: at-least-once runs the slot again."""
        if self.lease is not None:
            await self.lease.release()


async def claim(
    pool: SessionPool,
    job: str,
    slot: str,
    *,
    ttl: float,
    policy: Policy,
    wait: bool,
    timeout: float | None,
) -> AsyncRun:
    """Hold the slot's lock, then claim the slot's record if it is not over (see module doc)."""
    key = record_key(job, slot)
    check_policy(policy)
    store = records_of(pool.store)
    lock = LOCK_PREFIX + key
    timeout = check_arguments(lock, ttl, timeout, pool.drift, pool.margin)
    found = await store.read_record(key)
    seen = Slot.from_record(found) if found else None
    if seen is not None and seen.state in FINAL:  # over: no lock needed
        return AsyncRun(store, key, seen.state, seen)
    try:
        lease: AsyncLease = await acquire(pool, lock, ttl, wait=wait, timeout=timeout, on_wait=None)
    except NotAcquired:
        now = await store.read_record(key)
        current = Slot.from_record(now) if now else None
        return AsyncRun(store, key, current.state if current else "running", current)
    try:
        return await _claim_held(store, pool.owner, key, job, slot, lease, policy)
    except BaseException:
        await lease.release()
        raise


async def _claim_held(
    store: Records, owner: Owner, key: str, job: str, slot: str, lease: AsyncLease, policy: Policy
) -> AsyncRun:
    found = await store.read_record(key)
    before = Slot.from_record(found) if found else None
    version = found.version if found else 0
    if before is not None and before.state in FINAL:
        await lease.release()
        return AsyncRun(store, key, before.state, before)
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
        await lease.release()
        if written is None:
            raise LeaseLost(f"slot {job}/{slot}: the record changed while this process held it")
        return AsyncRun(store, key, "failed", failed)
    lease.check()
    mine = Slot(
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
    )
    written = await store.write_record(key, mine.to_json(), version)
    if written is None:
        raise LeaseLost(f"slot {job}/{slot}: the record changed while this process held it")
    return AsyncRun(store, key, "claimed", mine, lease, written.version)


async def history(store: Store, job: str) -> list[Slot]:
    """Every recorded slot of ``job``, in slot-key order."""
    return [Slot.from_record(r) for r in await records_of(store).list_records(job_prefix(job))]


class AsyncOnce:
    """``async with client.once(job, slot) as run``: the body runs the slot if ``run`` is true;
    a lost lease cancels it. Leaving records the end: ``done``, or ``failed`` with the body's
    exception (which propagates). A lost lease records nothing and raises ``LeaseLost``."""

    def __init__(self, claim: Callable[[], Awaitable[AsyncRun]]) -> None:
        self._claim = claim
        self._run: AsyncRun | None = None
        self._scope: anyio.CancelScope | None = None

    async def __aenter__(self) -> AsyncRun:
        self._run = run = await self._claim()
        if run and run.lease is not None:
            self._scope = anyio.CancelScope()
            self._scope.__enter__()
            run.lease.cancel_on_loss(self._scope)
        return run

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        run, scope = self._run, self._scope
        if run is None or scope is None:
            return False
        swallowed = bool(scope.__exit__(exc_type, exc, tb))
        if exc is None or swallowed:
            await run.complete()  # LeaseLost if the loss cancelled the body: nothing recorded
            return swallowed
        with anyio.CancelScope(shield=True), contextlib.suppress(TenureError):
            await run.complete(error=one_line(exc))  # the body's own exception says more
        return False


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:500] if text else type(exc).__name__
