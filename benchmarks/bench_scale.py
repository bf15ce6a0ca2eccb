"""Cost as the work grows (issue 28): locks held, waiters queued, elections observed, partitions.

    .venv/bin/python benchmarks/bench_scale.py                    # full run, about 8 minutes
    .venv/bin/python benchmarks/bench_scale.py --stores sqlite,redis --only hold,waiters
    .venv/bin/python benchmarks/bench_scale.py --smoke            # does every row work? (CI)

Four cases, each row in a fresh worker process of this script against a fresh namespace:

- ``hold``: one client holds N locks (one session); store calls per renewal interval, client CPU
  per interval, time to acquire the N.
- ``waiters``: W asyncio tasks of one client wait for one name that another client holds; memory
  per idle waiter (tracemalloc, and RSS as a cross-check), store calls per second while they wait,
  store calls per hand-over (holder releases, next waiter granted), by both clients.
- ``observe``: one client observes E elections, each led by another client; store calls per
  second while nothing changes.
- ``rebalance``: a group over 64 partitions, one member per process: from 3 members a fourth
  joins, one leaves (clean), one is SIGKILLed; seconds until the group owns every item again as
  its members' assignment says, in TTLs; with the default lock-delay (one TTL) and with 0.

Store calls are the calls through the store interface (``tenure.stores._spi``), counted by a
``FaultyStore`` that injects nothing; a watch's ``next`` that returns counts as one. A row that
fails (a session lost, a worker that dies or times out) is recorded with its one-line reason and
the run goes on. Tables to stdout, progress to stderr; the full run writes
``benchmarks/results/scale.json`` and ``benchmarks/scale.png`` (a smoke run: a temp dir).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import itertools
import json
import math
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import anyio

from _common import (
    SMOKE_STORES_HELP,
    SMOKE_TTL,
    BenchError,
    Child,
    Smoke,
    children,
    die_with_parent,
    each,
    emit,
    f,
    fan_out,
    progress,
    read_command,
    table,
    verdict,
)
from tenure import AsyncClient
from tenure._url import open_store
from tenure.stores._spi import Change, Store, Watch
from tenure.testing import FaultyStore

STORES = ("sqlite", "etcd", "postgres", "zookeeper", "redis")
CASES = ("hold", "waiters", "observe", "rebalance")
SIZES = {"hold": [1, 100, 1000, 10000], "waiters": [1, 10, 100, 1000], "observe": [1, 10, 100]}
SMOKE_SIZES = {"hold": [1, 3], "waiters": [1, 3], "observe": [1, 2]}
TTL = 3.0
PARTITIONS = 64
FIRST_MEMBERS = 3
MEMORY_TARGET_B = 10_000
RENEWAL = ("keep_alive", "revoked")  # a session's renewal: a keep-alive, then its revocations
REBALANCE_TARGET_TTLS = 2.0
EVENTS = ("join", "leave", "kill")
# Every call of the store interface a client makes (a watch's ``next``: counted by CountedWatch).
SPI_CALLS = (
    *("open_session", "keep_alive", "close_session", "attempt", "wait", "leave", "release"),
    *("locks", "lock_delays", "proclaim", "watch", "read_record", "write_record"),
    *("list_records", "write_held_record", "revoke", "revoked"),
)


# -- counting ------------------------------------------------------------------------------------


class CountedWatch(Watch):
    def __init__(self, inner: Watch, calls: collections.Counter[str]) -> None:
        self.inner = inner
        self.calls = calls

    async def next(self, timeout: float) -> list[Change]:
        try:
            return await self.inner.next(timeout)
        finally:
            self.calls["watch.next"] += 1

    async def aclose(self) -> None:
        await self.inner.aclose()


class CountingStore(FaultyStore):
    """Counts every call a client makes through the store interface, by name (no faults)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.calls: collections.Counter[str] = collections.Counter()
        for name in SPI_CALLS:  # instance attributes shadow the methods: one wrapper for all
            setattr(self, name, self._counted(name, getattr(self, name)))

    def _counted(
        self, name: str, call: Callable[..., Awaitable[Any]]
    ) -> Callable[..., Awaitable[Any]]:
        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            result = await call(*args, **kwargs)
            return CountedWatch(result, self.calls) if name == "watch" else result

        return counted

    def total(self, *, but: tuple[str, ...] = ()) -> int:
        return sum(n for name, n in self.calls.items() if name not in but)


def one_line(exc: BaseException) -> str:
    """An error's one-line reason (an exception group: its first leaf)."""
    while isinstance(getattr(exc, "exceptions", None), tuple) and exc.exceptions:  # type: ignore[attr-defined]
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:200]


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


# -- the workers (one row each) --------------------------------------------------------------------


async def hold(cfg: dict[str, Any]) -> dict[str, Any]:
    n, ttl, intervals = int(cfg["size"]), float(cfg["ttl"]), int(cfg["intervals"])
    store = CountingStore(open_store(cfg["url"]))
    out: dict[str, Any] = {}
    async with AsyncClient(store) as client:
        start = time.perf_counter()
        leases = []
        try:
            for i in range(n):
                leases.append(await client.lock(f"held-{i}", ttl).acquire())
        except Exception as exc:
            return {"error": f"after {len(leases)} of {n} locks: {one_line(exc)}"}
        out["acquire_s"] = time.perf_counter() - start
        store.calls.clear()
        cpu0 = time.process_time()
        await anyio.sleep(ttl / 3 * intervals + 0.05)
        cpu = time.process_time() - cpu0
        lost = sum(1 for lease in leases if lease.lost)
        if lost:
            return {"error": f"{lost} of {n} leases lost while held", **out}
        out["calls_per_interval"] = store.total() / intervals
        out["keep_alives_per_interval"] = store.calls["keep_alive"] / intervals
        out["cpu_ms_per_interval"] = cpu / intervals * 1e3
        out["calls"] = dict(store.calls)
        out["sessions_lost"] = store.sessions_opened - 1
    return out


async def waiters(cfg: dict[str, Any]) -> dict[str, Any]:
    w, ttl, settle = int(cfg["size"]), float(cfg["ttl"]), float(cfg["settle"])
    handovers = min(w, int(cfg["handovers"]))
    holder_store = CountingStore(open_store(cfg["url"]))
    waiter_store = CountingStore(open_store(cfg["url"]))
    stores = (holder_store, waiter_store)
    out: dict[str, Any] = {}
    send, receive = anyio.create_memory_object_stream[Any](math.inf)
    async with AsyncClient(holder_store) as holder, AsyncClient(waiter_store) as client:
        current = await holder.lock("queue", ttl).acquire()
        errors: list[str] = []

        async def wait_for_it() -> None:
            try:
                send.send_nowait(await client.lock("queue", ttl).acquire())
            except Exception as exc:
                errors.append(one_line(exc))

        async with anyio.create_task_group() as tg:
            gc_rss = rss_bytes()
            tracemalloc.start()
            traced0 = tracemalloc.get_traced_memory()[0]
            for _ in range(w):
                tg.start_soon(wait_for_it)
            with anyio.move_on_after(30 + w * 0.05):  # every waiter has asked the store
                while waiter_store.calls["attempt"] < w and not errors:
                    await anyio.sleep(0.05)
            out["asked"] = waiter_store.calls["attempt"]  # below W: some never reached the store
            await anyio.sleep(settle)
            traced = tracemalloc.get_traced_memory()[0] - traced0
            tracemalloc.stop()
            out["traced_b_per_waiter"] = traced / w
            out["rss_b_per_waiter"] = (rss_bytes() - gc_rss) / w
            if errors:
                tg.cancel_scope.cancel()
                return {"error": f"{len(errors)} of {w} waiters failed: {errors[0]}", **out}
            for s in stores:
                s.calls.clear()
            idle = float(cfg["idle"])
            await anyio.sleep(idle)
            out["idle_calls_per_s"] = sum(s.total(but=RENEWAL) for s in stores) / idle
            out["idle_calls"] = dict(holder_store.calls + waiter_store.calls)
            per_handover: list[int] = []
            handover_calls: collections.Counter[str] = collections.Counter()
            times: list[float] = []
            for n in range(handovers):
                for s in stores:
                    s.calls.clear()
                start = time.perf_counter()
                await current.release()
                got = None
                with anyio.move_on_after(30):
                    got = await receive.receive()
                if got is None:
                    tg.cancel_scope.cancel()
                    why = f"; {errors[0]}" if errors else ""
                    return {"error": f"hand-over {n + 1}: nobody granted in 30 s{why}", **out}
                current = got
                times.append(time.perf_counter() - start)
                per_handover.append(sum(s.total(but=RENEWAL) for s in stores))
                handover_calls += holder_store.calls + waiter_store.calls
            # A session lost and opened again meanwhile (every waiter queues again on the new one).
            out["sessions_lost"] = sum(s.sessions_opened for s in stores) - len(stores)
            out["calls_per_handover"] = sum(per_handover) / len(per_handover)
            out["handover_ms"] = sorted(times)[len(times) // 2] * 1e3
            out["each_handover"] = per_handover
            out["handover_calls"] = dict(handover_calls)
            tg.cancel_scope.cancel()
            if errors:
                return {"error": f"{len(errors)} of {w} waiters failed: {errors[0]}", **out}
        await current.release()
    return out


async def observe(cfg: dict[str, Any]) -> dict[str, Any]:
    e, ttl, window = int(cfg["size"]), float(cfg["ttl"]), float(cfg["window"])
    store = CountingStore(open_store(cfg["url"]))
    out: dict[str, Any] = {}
    async with AsyncClient(open_store(cfg["url"])) as leader, AsyncClient(store) as client:
        for i in range(e):
            await leader.election(f"e-{i}", ttl, value=f"leader {i}").acquire()
        seen: collections.Counter[int] = collections.Counter()
        settled = anyio.Event()

        async def follow(i: int) -> None:
            async for now in client.election(f"e-{i}").observe():
                if now is not None and now.value is not None:
                    seen[i] += 1
                    if len(seen) == e:
                        settled.set()

        async with anyio.create_task_group() as tg:
            for i in range(e):
                tg.start_soon(follow, i)
            with anyio.fail_after(30 + e * 0.2):
                await settled.wait()
            await anyio.sleep(0.5)
            before = sum(seen.values())
            store.calls.clear()
            await anyio.sleep(window)
            out["calls_per_s"] = store.total() / window
            out["reads_per_s"] = store.calls["locks"] / window
            out["watch_next_per_s"] = store.calls["watch.next"] / window
            out["changes_seen"] = sum(seen.values()) - before
            out["calls"] = dict(store.calls)
            tg.cancel_scope.cancel()
    return out


async def member(cfg: dict[str, Any]) -> None:
    """One partition-group member: says ``state OWNED ASSIGNED MEMBERS STAMP`` whenever that
    changes; leaves on ``leave``; SIGKILLed otherwise."""
    items = [f"p{i:02d}" for i in range(PARTITIONS)]
    me = str(cfg["member"])
    async with AsyncClient(open_store(cfg["url"])) as client:
        emit(f"joining {time.monotonic()}")
        group = client.partitions(
            "scale", items, ttl=float(cfg["ttl"]), member=me, lock_delay=cfg["lock_delay"]
        )
        async with group as m, anyio.create_task_group() as tg:

            async def consume() -> None:
                async for _ in m.changes():  # asking for the next change releases a leaving item
                    pass

            async def report() -> None:
                last = None
                while True:
                    assigned = sum(1 for owner in m.assignment().values() if owner == me)
                    now = (len(m.owned), assigned, len(m.members))
                    if now != last:
                        emit(f"state {' '.join(map(str, now))} {time.monotonic()}")
                        last = now
                    await anyio.sleep(0.01)

            tg.start_soon(consume)
            tg.start_soon(report)
            await anyio.to_thread.run_sync(read_command)  # "leave"
            tg.cancel_scope.cancel()
    emit("result {}")


WORKERS: dict[str, Callable[[dict[str, Any]], Awaitable[Any]]] = {
    "hold": hold,
    "waiters": waiters,
    "observe": observe,
}


def worker(kind: str, cfg: dict[str, Any]) -> None:
    die_with_parent()
    if kind == "member":
        anyio.run(member, cfg)
        return
    try:
        result = anyio.run(WORKERS[kind], cfg)
    except Exception as exc:
        result = {"error": one_line(exc)}
    emit("result " + json.dumps(result))


# -- the parent: servers, rows, the group ----------------------------------------------------------


@contextlib.contextmanager
def server(kind: str, tmp: Path) -> Iterator[Callable[[], str]]:
    """Start the store's server(s) on 127.0.0.1; yields a maker of fresh-namespace URLs."""
    from tenure.stores._server import ram_disk

    with contextlib.ExitStack() as stack:
        if kind == "sqlite":
            yield lambda: f"sqlite:///{tmp}/{uuid.uuid4().hex[:8]}.db"
            return
        if kind == "etcd":
            from tenure.stores.etcd.server import EtcdCluster

            etcd = stack.enter_context(EtcdCluster(members=3, data_root=ram_disk()))
            base = f"etcd://{','.join(etcd.endpoints)}/"
        elif kind == "zookeeper":
            from tenure.stores.zookeeper.server import ZooKeeperEnsemble

            zk = stack.enter_context(ZooKeeperEnsemble(servers=3, data_root=ram_disk()))
            base = f"zookeeper://{','.join(zk.endpoints)}/"
        elif kind == "redis":
            from tenure.stores.redis.server import RedisServer

            redis = stack.enter_context(RedisServer())
            base = f"redis://{redis.endpoint}/0?prefix="
        elif kind == "postgres":
            from tenure.stores.postgres.server import PostgresServer

            pg = stack.enter_context(PostgresServer())
            base = f"{pg.dsn}?schema="
        else:
            raise SystemExit(f"unknown store {kind!r}")
        yield lambda: f"{base}s{uuid.uuid4().hex[:8]}"


def run_row(case: str, kind: str, size: int, cfg: dict[str, Any], tmp: Path) -> dict[str, Any]:
    row: dict[str, Any] = {"store": kind, "size": size}
    log = tmp / f"{case}-{kind}-{size}.log"
    began = time.monotonic()
    try:
        with children() as kids:
            kids.append(Child(__file__, case, {**cfg, "size": size}, log))
            row.update(kids[0].result(timeout=float(cfg["timeout"])))
    except BenchError as exc:
        row["error"] = one_line(exc)
    row["row_s"] = time.monotonic() - began
    progress(f"{case} {kind} {size}: {row.get('error', 'ok')} ({row['row_s']:.1f} s)")
    return row


class Group:
    """Members of one partition group, each a process; their ``state`` lines read by threads."""

    def __init__(self, url: str, ttl: float, lock_delay: float | None, tmp: Path) -> None:
        self.cfg = {"url": url, "ttl": ttl, "lock_delay": lock_delay}
        self.tmp = tmp
        self.kids: dict[str, Child] = {}
        self.live: set[str] = set()
        self.states: dict[str, tuple[int, int, int, float]] = {}
        self.joined: dict[str, float] = {}
        self.lines: queue.Queue[tuple[str, str | None]] = queue.Queue()

    def join(self, me: str) -> None:
        kid = Child(__file__, "member", {**self.cfg, "member": me}, self.tmp / f"m-{me}.log")
        self.kids[me] = kid
        self.live.add(me)

        def read() -> None:
            try:
                while True:
                    self.lines.put((me, kid.expect(timeout=3600)))
            except (BenchError, OSError, ValueError):  # it exited, or close() shut its pipe
                self.lines.put((me, None))

        threading.Thread(target=read, daemon=True).start()

    def settle(self, since: float | None, timeout: float) -> float:
        """Seconds from ``since`` (None: the newest member's ``joining``) until every live member
        owns what its assignment gives it, all see the same group, and every item is owned."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"not settled in {timeout:.0f} s: {self.describe()}")
            try:
                me, line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                if me in self.live:
                    raise BenchError(f"member {me} died: {self.kids[me].log.read_text()[-300:]}")
                continue
            word, *rest = line.split()
            if word == "joining":
                self.joined[me] = float(rest[0])
            elif word == "state":
                owned, assigned, members = (int(x) for x in rest[:3])
                self.states[me] = (owned, assigned, members, float(rest[3]))
            states = [self.states.get(m) for m in self.live]
            if (
                all(s is not None and s[0] == s[1] and s[2] == len(self.live) for s in states)
                and sum(s[0] for s in states if s is not None) == PARTITIONS
            ):
                start = since if since is not None else max(self.joined.values())
                return max(s[3] for s in states if s is not None) - start

    def describe(self) -> str:
        return "; ".join(f"{m}: owned/assigned/members {self.states.get(m)}" for m in self.live)

    def leave(self, me: str) -> float:
        self.live.discard(me)
        since = time.monotonic()
        self.kids[me].send("leave")
        return since

    def kill(self, me: str) -> float:
        self.live.discard(me)
        since = time.monotonic()
        os.kill(self.kids[me].pid, signal.SIGKILL)
        return since

    def close(self) -> None:
        for kid in self.kids.values():
            kid.stop()


def rebalance(
    kind: str, url: str, ttl: float, lock_delay: float | None, tmp: Path
) -> dict[str, Any]:
    """3 members settle; a fourth joins, one leaves, one is killed: each timed until settled."""
    row: dict[str, Any] = {"store": kind, "ttl_s": ttl, "lock_delay_s": lock_delay}
    limit = 10 * ttl + 20
    group = Group(url, ttl, lock_delay, tmp)
    step = "start"
    try:
        for i in range(FIRST_MEMBERS):
            group.join(f"m{i}")
        row["start_s"] = group.settle(None, limit + 30)
        step = "join"
        group.join(f"m{FIRST_MEMBERS}")
        row["join_s"] = group.settle(None, limit)
        step = "leave"
        row["leave_s"] = group.settle(group.leave("m0"), limit)
        step = "kill"
        row["kill_s"] = group.settle(group.kill("m1"), limit)
    except BenchError as exc:
        row["error"] = f"{step}: {one_line(exc)}"
    finally:
        group.close()
    for event in EVENTS:
        if f"{event}_s" in row:
            row[f"{event}_ttls"] = row[f"{event}_s"] / ttl
    delay = "default" if lock_delay is None else f"{lock_delay:g}"
    progress(f"rebalance {kind} lock-delay {delay}: {row.get('error', 'ok')}")
    return row


def run_store(
    kind: str, cases: list[str], sizes: dict[str, list[int]], smoke: bool, tmp: Path
) -> dict[str, list[dict[str, Any]]]:
    ttl = SMOKE_TTL if smoke else TTL
    settings: dict[str, dict[str, Any]] = {
        "hold": {"intervals": 2 if smoke else 3},
        "waiters": {
            "settle": 0.2 if smoke else 1.0,
            "idle": 0.5 if smoke else 2.0,
            "handovers": 2 if smoke else 5,
        },
        "observe": {"window": 1.5 if smoke else 2 * TTL},
    }
    progress(f"{kind}: starting the server")
    with server(kind, tmp) as fresh:
        jobs: list[tuple[str, Callable[[], dict[str, Any]]]] = []
        for case in cases:
            cfg = {"ttl": ttl, "timeout": 60 if smoke else 300, **settings.get(case, {})}
            if case == "rebalance":
                jobs += [
                    (case, functools.partial(rebalance, kind, fresh(), ttl, delay, tmp))
                    for delay in (None, 0.0)
                ]
            else:
                jobs += [
                    (
                        case,
                        functools.partial(run_row, case, kind, size, {**cfg, "url": fresh()}, tmp),
                    )
                    for size in sizes[case]
                ]
        # A smoke run's rows side by side (mostly waiting); a measurement's one at a time.
        done = each([job for _, job in jobs], lambda job: job(), side_by_side=smoke)
    found: dict[str, list[dict[str, Any]]] = {case: [] for case in cases}
    for (case, _), row in zip(jobs, done, strict=True):
        found[case].append(row)
    return found


# -- output ---------------------------------------------------------------------------------------


def cell(row: dict[str, Any], key: str, digits: int = 0) -> str:
    return "FAILED" if key not in row and "error" in row else f(row.get(key), digits)


def failures(rows: list[dict[str, Any]]) -> list[str]:
    return [
        f"  FAILED {r['store']} {r.get('size', '')}: {r['error']}" for r in rows if "error" in r
    ]


def flat(rows: list[dict[str, Any]], key: str) -> str:
    """Is ``key`` O(1) in the size? The largest size's figure within 1.5x (+1) of the smallest."""
    ok = [r for r in rows if key in r]
    if len(ok) < 2:
        return "-"
    first, last = ok[0][key], ok[-1][key]
    return verdict(last <= first * 1.5 + 1 and len(ok) == len(rows))


def by_store(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(r["store"], []).append(r)
    return out


def derive(found: dict[str, list[dict[str, Any]]]) -> None:
    """Memory per waiter at the margin: the growth from the previous W of the same store, per
    added waiter (the first waiter also pays for what any wait sets up once)."""
    for rows in by_store(found.get("waiters", [])).values():
        ok = [r for r in rows if "traced_b_per_waiter" in r]
        for prev, r in itertools.pairwise(ok):
            for key in ("traced_b", "rss_b"):
                grown = (
                    r[f"{key}_per_waiter"] * r["size"] - prev[f"{key}_per_waiter"] * prev["size"]
                )
                r[f"{key}_marginal"] = grown / (r["size"] - prev["size"])


def report(found: dict[str, list[dict[str, Any]]], ttl: float) -> str:
    parts = []
    if found.get("hold"):
        rows = [
            [
                r["store"],
                f"{r['size']:,}",
                cell(r, "calls_per_interval", 2),
                cell(r, "keep_alives_per_interval", 2),
                cell(r, "cpu_ms_per_interval", 1),
                cell(r, "acquire_s", 2),
                flat(same, "calls_per_interval") if r is same[-1] else "",
            ]
            for same in by_store(found["hold"]).values()
            for r in same
        ]
        parts.append(
            f"1. N locks held by one client (TTL {ttl:g} s, renewal every {ttl / 3:g} s)\n"
            + table(
                [
                    "store",
                    "N",
                    "calls/interval",
                    "keep-alives",
                    "CPU ms/interval",
                    "acquire all s",
                    "O(1) in N",
                ],
                rows,
            )
        )
        parts.extend(failures(found["hold"]))
    if found.get("waiters"):
        rows = [
            [
                r["store"],
                f"{r['size']:,}",
                cell(r, "calls_per_handover", 1),
                cell(r, "handover_ms", 1),
                cell(r, "idle_calls_per_s", 1),
                cell(r, "sessions_lost"),
                cell(r, "traced_b_per_waiter"),
                f(r.get("traced_b_marginal")),
                cell(r, "rss_b_per_waiter"),
                f(r.get("rss_b_marginal")),
                verdict(r["traced_b_marginal"] <= MEMORY_TARGET_B)
                if "traced_b_marginal" in r
                else "-",
                flat(same, "calls_per_handover") if r is same[-1] else "",
            ]
            for same in by_store(found["waiters"]).values()
            for r in same
        ]
        parts.append(
            "2. W waiters on one name (one client, one task each)\n"
            + table(
                [
                    "store",
                    "W",
                    "calls/hand-over",
                    "hand-over ms",
                    "idle calls/s",
                    "sessions lost",
                    "traced B/waiter",
                    "marginal",
                    "RSS B/waiter",
                    "marginal",
                    "marginal traced <= 10 kB",
                    "O(1) in W",
                ],
                rows,
            )
        )
        parts.extend(failures(found["waiters"]))
    if found.get("observe"):
        rows = [
            [
                r["store"],
                f"{r['size']:,}",
                cell(r, "calls_per_s", 2),
                cell(r, "reads_per_s", 2),
                cell(r, "watch_next_per_s", 2),
                f(r["calls_per_s"] / r["size"], 2) if "calls_per_s" in r else "-",
                cell(r, "changes_seen"),
            ]
            for r in found["observe"]
        ]
        parts.append(
            f"3. E elections observed by one client, nothing changing (leaders' TTL {ttl:g} s)\n"
            + table(
                [
                    "store",
                    "E",
                    "calls/s",
                    "reads/s",
                    "watch next/s",
                    "calls/s per election",
                    "changes seen",
                ],
                rows,
            )
        )
        parts.extend(failures(found["observe"]))
    if found.get("rebalance"):
        rows = [
            [
                r["store"],
                "default (1 TTL)" if r["lock_delay_s"] is None else "0",
                *(
                    f"{r[f'{e}_s']:.2f} s = {r[f'{e}_ttls']:.2f} TTL" if f"{e}_s" in r else "FAILED"
                    for e in EVENTS
                ),
                verdict(max(r.get(f"{e}_ttls", math.inf) for e in EVENTS) <= REBALANCE_TARGET_TTLS),
            ]
            for r in found["rebalance"]
        ]
        parts.append(
            f"4. {PARTITIONS} partitions, {FIRST_MEMBERS} members, then a 4th joins, one leaves, "
            f"one is killed; TTL {ttl:g} s: time until settled\n"
            + table(
                ["store", "lock-delay", "join", "leave (clean)", "kill (SIGKILL)", "all <= 2 TTL"],
                rows,
            )
        )
        parts.extend(
            f"  FAILED {r['store']}: {r['error']}" for r in found["rebalance"] if "error" in r
        )
    return "\n\n".join(parts)


def picture(found: dict[str, list[dict[str, Any]]], path: Path) -> None:
    """One panel per case, a colour and marker per store (equal figures would hide each other
    otherwise); a failed size is a red cross at the bottom of its panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    style = {kind: (f"C{i}", "os^vD"[i], 9 - 1.3 * i) for i, kind in enumerate(STORES)}
    panels = [
        ("hold", ["calls_per_interval"], "1. N locks held: store calls per renewal interval", "N"),
        (
            "waiters",
            ["calls_per_handover", "idle_calls_per_s"],
            "2. W waiters: calls per hand-over (solid), per s idle (dotted)",
            "W",
        ),
        ("observe", ["calls_per_s"], "3. E elections observed: store calls per second", "E"),
    ]
    fig, axes = plt.subplots(1, 4, figsize=(17, 4))
    for ax, (case, keys, title, x) in zip(axes, panels, strict=False):
        for kind, rows in by_store(found.get(case, [])).items():
            color, marker, size = style.get(kind, ("k", "o", 6))
            for key, line in zip(keys, ("-", ":"), strict=False):
                ok = [r for r in rows if key in r]
                ax.plot(
                    [r["size"] for r in ok],
                    [r[key] for r in ok],
                    marker=marker,
                    markersize=size,
                    fillstyle="none",
                    linestyle=line,
                    color=color,
                    label=kind if line == "-" else None,
                )
            failed = [r["size"] for r in rows if "error" in r]
            ax.plot(failed, [0] * len(failed), "x", color="red", markersize=10)
        ax.set_xscale("log")
        ax.set_yscale("symlog", linthresh=1)
        ax.set_ylim(0, max(ax.get_ylim()[1] * 2, 3))  # room above a flat line at the top
        ax.set_xlabel(x)
        ax.set_title(title, fontsize=9)
        ax.grid(True, alpha=0.3)
    ax = axes[3]
    for kind, rows in by_store(found.get("rebalance", [])).items():
        color, marker, size = style.get(kind, ("k", "o", 6))
        for r in rows:
            default = r["lock_delay_s"] is None
            ax.plot(
                list(EVENTS),
                [r.get(f"{e}_ttls", math.nan) for e in EVENTS],
                marker=marker,
                markersize=size,
                fillstyle="none",
                color=color,
                linestyle="-" if default else "--",
                label=f"{kind}, lock-delay {'1 TTL' if default else 0}",
            )
    ax.axhline(REBALANCE_TARGET_TTLS, color="grey", linewidth=0.8)
    ax.set_ylim(bottom=0)
    ax.set_title(f"4. {PARTITIONS} partitions: TTLs to settle (line: target)", fontsize=9)
    ax.grid(True, alpha=0.3)
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], json.loads(sys.argv[3]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--only", default=",".join(CASES), help="cases: " + ",".join(CASES))
    here = Path(__file__).parent
    parser.add_argument("--json", type=Path, default=here / "results" / "scale.json")
    parser.add_argument("--png", type=Path, default=here / "scale.png")
    parser.add_argument(
        "--sizes",
        action="append",
        default=[],
        metavar="CASE=N,N",
        help="the sizes of a case, e.g. waiters=1,100 (default: " + str(SIZES) + ")",
    )
    parser.add_argument("--smoke", action="store_true", help=SMOKE_STORES_HELP)
    args = parser.parse_args()
    stores, cases = args.stores.split(","), args.only.split(",")
    sizes = dict(SMOKE_SIZES if args.smoke else SIZES)
    for given in args.sizes:
        case, _, counts = given.partition("=")
        sizes[case] = [int(n) for n in counts.split(",")]
    if args.smoke and len(stores) > 1:  # one store per process, each with its own server
        return fan_out(__file__, [["--stores", kind, "--only", args.only] for kind in stores])
    started = load()
    print(f"scale: stores {', '.join(stores)}; {started}", flush=True)
    with tempfile.TemporaryDirectory(prefix="tenure-scale-") as tmp_dir:
        tmp = Path(tmp_dir)
        found: dict[str, list[dict[str, Any]]] = {case: [] for case in cases}
        for kind in stores:
            for case, rows in run_store(kind, cases, sizes, args.smoke, tmp).items():
                found[case].extend(rows)
        derive(found)
        print(report(found, SMOKE_TTL if args.smoke else TTL), flush=True)
        out_json, out_png = (
            (tmp / "scale.json", tmp / "scale.png") if args.smoke else (args.json, args.png)
        )
        meta = {
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(sys.argv),
            "load_start": started,
            "load_end": load(),
        }
        out_json.parent.mkdir(parents=True, exist_ok=True)
        out_json.write_text(json.dumps({"meta": meta, **found}, indent=1) + "\n")
        picture(found, out_png)
        print(f"\nload at the end: {meta['load_end']}")
        if not args.smoke:
            print(f"wrote {out_json} and {out_png}")
            return 0
        smoke = Smoke()
        keys = {
            "hold": "calls_per_interval",
            "waiters": "calls_per_handover",
            "observe": "calls_per_s",
            "rebalance": "kill_s",
        }
        for case, rows in found.items():
            for r in rows:
                row = f"{case} {r['store']} {r.get('size', r.get('lock_delay_s'))}"
                if "error" in r:
                    smoke.fail(row, r["error"])
                else:
                    smoke.number(row, r.get(keys[case]))
        smoke.number("picture", out_png.stat().st_size)
        return smoke.exit_code()


if __name__ == "__main__":
    sys.exit(main())
