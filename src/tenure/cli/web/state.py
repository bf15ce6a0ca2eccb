"""What ``tenure serve`` shows, read from the store through the public client only: one JSON
object (``GET /api/state``, and each server-sent event). docs/serve.md describes its shape.

Nothing secret goes in it: the store's URL without its user, password or query (a TLS key's
path is a query option), and of each holder only what ``tenure ls`` prints.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any
from urllib.parse import urlsplit

import tenure
from tenure import LockDelay, LockInfo, SlotRecord, describe

from ..ls import recipes
from ..partitions import read_map

State = dict[str, Any]
HISTORY_PER_JOB = 20
"""The last slots of each job that the page shows (``tenure history NAME`` shows them all)."""
TIMES = ("expires_in", "free_in", "read_at")
"""What changes on every read without anything having happened (leases count down)."""


def public_url(url: str) -> str:
    """The store's URL as the page shows it: scheme, host and path only. ``client.url`` masks
    a password but keeps the user and the query, where TLS files (a key's path) are named."""
    parts = urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2]  # (etcd: several, comma-separated)
    return f"{parts.scheme}://{hosts}{parts.path}"


def _holder(info: LockInfo) -> State:
    return {"token": info.token, **asdict(info.holder), "expires_in": round(info.expires_in, 3)}


def _plain(infos: Iterable[LockInfo]) -> tuple[list[State], list[State]]:
    """Plain locks, and elections: a plain name whose holder proclaimed a value (a leader
    always does, host and pid by default; a lock never does)."""
    locks: list[State] = []
    leaders: list[State] = []
    for info in infos:
        if describe(info.name) is not None:
            continue
        if info.value is None:
            locks.append({"name": info.name, **_holder(info), "waiters": info.waiters})
        else:
            leader = tenure.Leader.of(info)
            assert leader is not None
            term = {"name": info.name, "term": leader.term, "value": leader.value}
            leaders.append(
                {**term, **asdict(info.holder), "expires_in": _holder(info)["expires_in"]}
            )
    return locks, leaders


def _semaphores(infos: list[LockInfo]) -> list[State]:
    found = []
    for name, group in recipes(infos, "semaphore", "queue").items():
        permits = max(group.counts, default=None)  # as `tenure ls` reads it: the holders' count
        holders = [{"slot": slot, "lock": info.name, **_holder(info)} for slot, info in
                   sorted(zip(group.slots, group.holders, strict=True))]  # fmt: skip
        found.append({"name": name, "permits": permits, "held": len(holders),
                      "holders": holders, "waiting": group.waiting})  # fmt: skip
    return found


def _rwlocks(infos: list[LockInfo]) -> list[State]:
    found = []
    for name, group in recipes(infos, "rwlock", "gate").items():
        gate = group.gate
        readers = [{"lock": info.name, **_holder(info)} for info in group.holders]
        # The gate's holder writes, or is the next reader or writer in line (docs/rwlocks.md).
        writer = None if gate is None else {"lock": gate.name, **_holder(gate),
                                            "waiters": gate.waiters}  # fmt: skip
        found.append({"name": name, "readers": readers, "gate": writer})
    return found


def _partitions(infos: list[LockInfo]) -> list[State]:
    groups = sorted({lock.of for info in infos if (lock := describe(info.name)) is not None
                     and lock.kind == "partition group"})  # fmt: skip
    prefixes = {group: tenure.PartitionLocks(group).prefix for group in groups}
    return [
        read_map(group, [info for info in infos if info.name.startswith(prefixes[group])])
        for group in groups
    ]


def _held_back(held: LockDelay) -> State:
    """A name held back; ``revoked``: who revoked its last grant, as fields and as the line
    ``tenure ls`` prints (null: its lease ended without a release)."""
    revoked = held.revoked
    return {
        "name": held.name,
        "token": held.token,
        "free_in": round(held.free_in, 3),
        "revoked": None if revoked is None else {**asdict(revoked), "text": revoked.describe()},
    }


def _history(slots: list[SlotRecord]) -> list[State]:
    """The last `HISTORY_PER_JOB` slots of each job, newest first within a job."""
    by_job: dict[str, list[SlotRecord]] = {}
    for slot in slots:
        by_job.setdefault(slot.job, []).append(slot)
    return [
        {"job": job, "slots": [{**asdict(s), "duration": s.duration} for s in
                               sorted(found, key=lambda s: s.started)[-HISTORY_PER_JOB:][::-1]]}
        for job, found in sorted(by_job.items())
    ]  # fmt: skip


async def read_state(client: tenure.AsyncClient) -> State:
    """Everything the page shows, as the store has it now (``StoreUnavailable`` if it cannot
    be read)."""
    infos = sorted(await client.locks(), key=lambda info: info.name)
    held_back = await client.lock_delays()
    slots = await client.history() if client.capabilities.records else []
    locks, leaders = _plain(infos)
    return {
        "store": {
            "url": public_url(client.url),
            "grade": client.capabilities.grade,
            "revoke": client.capabilities.revoke,
        },
        "read_at": round(time.time(), 3),
        "locks": locks,
        "held_back": [_held_back(h) for h in sorted(held_back, key=lambda h: h.name)],
        "semaphores": _semaphores(infos),
        "rwlocks": _rwlocks(infos),
        "leaders": leaders,
        "partitions": _partitions(infos),
        "history": _history(slots),
    }


def settled(state: object) -> object:
    """The state but what only the passing of time changes: what a change of it is."""
    if isinstance(state, dict):
        return {k: settled(v) for k, v in state.items() if k not in TIMES}
    if isinstance(state, list):
        return [settled(v) for v in state]
    return state


__all__ = ["State", "public_url", "read_state", "settled"]
