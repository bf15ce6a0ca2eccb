"""Leader fail-over: from the leader's end to the new leader's first fenced write.

    .venv/bin/python benchmarks/bench_election.py [--rounds 5] [--ttl 2] [--only etcd]
    .venv/bin/python benchmarks/bench_election.py --smoke    # does every row work? (CI)

For each store (the embedded SQLite file, a 3-member etcd cluster and a PostgreSQL server,
started on loopback), a
leader process campaigns and leads; a follower in this process campaigns and, once elected,
makes one fenced write (``tenure.fence`` on a local SQLite resource) with its term. Three ways
for the leader to go:

- resign: the leader releases its leadership (graceful; the next leader is granted at once),
- SIGKILL: the leader process is killed (the store expires its lease after the TTL),
- partition: the leader's links to the store are blackholed (etcd, PostgreSQL; TCP proxies): the
  leader notices by its own deadline and the store expires its lease later — the gap between
  the old leader stopping and the new one writing is shown (it must be positive).

A leader that ends without resigning (SIGKILL, partition) leaves its name held back for the
leader's lock-delay (rule 8; default one TTL): those two are run twice, with the default
lock-delay and with ``lock_delay=0`` (the bare expiry). A resign frees the name at once.

Side by side, on the same cluster: etcd's own election API (``/v3/election``: a campaign on a
kept-alive lease, resign). kazoo's Election needs ZooKeeper, not a store here yet.

Times are CLOCK_MONOTONIC stamps shared by the processes of this host.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import tenure
from _common import SMOKE_HELP, SMOKE_TTL, Smoke, fan_out
from tenure.chaos.runner import endpoints, with_endpoints
from tenure.fence import SQLFence
from tenure.stores.etcd.server import EtcdCluster
from tenure.stores.postgres.server import PostgresServer
from tenure.testing.proxy import ChaosProxy

LEADER = textwrap.dedent(
    """
    import sys, time, tenure
    delay = None if sys.argv[3] == "default" else float(sys.argv[3])
    client = tenure.connect(sys.argv[1], lock_delay=delay)
    lead = client.election("bench", float(sys.argv[2]), value="old").acquire()
    lead.on_lost(lambda _: print("lost", time.monotonic(), flush=True))
    print("leading", lead.term, flush=True)
    if sys.stdin.readline().strip() == "resign":
        t = time.monotonic()
        lead.release()
        print("resigned", t, flush=True)
    time.sleep(60)
    """
)


# etcd's own election API (v3election, through the same JSON gateway), for comparison: a lease
# kept alive by a thread, a campaign that blocks until elected, resign. It has no notion of a
# leader's deadline: a cut-off leader is never told that it lost.
NATIVE = textwrap.dedent(
    """
    import base64, sys, threading, time, httpx
    base, ttl, role = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    b64 = lambda s: base64.b64encode(s.encode()).decode()
    http = httpx.Client(base_url=base, timeout=60)
    lease = http.post("/v3/lease/grant", json={"TTL": str(max(1, round(ttl)))}).json()["ID"]
    def keep():
        beat = httpx.Client(base_url=base, timeout=10)
        while True:
            beat.post("/v3/lease/keepalive", json={"ID": lease})
            time.sleep(ttl / 3)
    threading.Thread(target=keep, daemon=True).start()
    body = {"name": b64("bench-native"), "lease": lease, "value": b64(role)}
    print("campaigning", flush=True)
    leader = http.post("/v3/election/campaign", json=body).json()["leader"]
    print("leading", leader["rev"], flush=True)
    if role == "old" and sys.stdin.readline().strip() == "resign":
        t = time.monotonic()
        http.post("/v3/election/resign", json={"leader": leader})
        print("resigned", t, flush=True)
    time.sleep(60)
    """
)


def native_round(base: str, how: str, ttl: float, resource: str) -> float:
    """etcd's election API: from the leader's end to the new leader's first fenced write."""
    argv = [sys.executable, "-c", NATIVE, base, str(ttl)]
    old = subprocess.Popen([*argv, "old"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert old.stdin is not None and old.stdout is not None
    new = None
    try:
        assert old.stdout.readline().startswith("campaigning")
        assert old.stdout.readline().startswith("leading")
        new = subprocess.Popen([*argv, "new"], stdout=subprocess.PIPE, text=True)
        assert new.stdout is not None
        assert new.stdout.readline().startswith("campaigning")
        time.sleep(0.3)  # its campaign has reached etcd and waits
        if how == "resign":
            old.stdin.write("resign\n")
            old.stdin.flush()
            start = float(old.stdout.readline().split()[1])
        else:
            start = time.monotonic()
            old.kill()
        rev = int(new.stdout.readline().split()[1])
        return fenced_write(resource, base, rev) - start
    finally:
        for proc in (old, new):
            if proc is not None:
                proc.kill()
                proc.wait()


def fenced_write(resource: str, fence: str, term: int) -> float:
    db = sqlite3.connect(resource, isolation_level=None)
    try:
        with SQLFence().fenced(db, fence, term) as cur:
            cur.execute("INSERT INTO log VALUES (?)", (term,))
        return time.monotonic()
    finally:
        db.close()


def one_round(
    url: str,
    leader_url: str,
    how: str,
    ttl: float,
    lock_delay: float | None,
    resource: str,
    proxies: list[Any],
) -> tuple[float, float | None]:
    """Seconds from the leader's end to the new leader's first fenced write, and the gap
    between the old leader noticing its loss and that write (partition only). ``lock_delay``
    is the old leader's (None: the default)."""
    delay = "default" if lock_delay is None else str(lock_delay)
    leader = subprocess.Popen(
        [sys.executable, "-c", LEADER, leader_url, str(ttl), delay],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert leader.stdout is not None and leader.stdin is not None
    try:
        assert leader.stdout.readline().startswith("leading")
        with tenure.connect(url) as follower:
            if how == "resign":
                leader.stdin.write("resign\n")
                leader.stdin.flush()
                start = float(leader.stdout.readline().split()[1])
            elif how == "kill":
                start = time.monotonic()
                leader.kill()
            else:
                start = time.monotonic()
                for proxy in proxies:  # every link of the leader to the store
                    proxy.set_mode("blackhole")
            lead = follower.election("bench", value="new", ttl=ttl).acquire(timeout=30)
            written = fenced_write(resource, url, lead.term)  # one fence per store
            lead.release()
        lost_gap = None
        if how == "partition":
            line = leader.stdout.readline().split()
            lost_gap = written - float(line[1]) if line and line[0] == "lost" else None
        return written - start, lost_gap
    finally:
        leader.kill()
        leader.wait()
        for proxy in proxies:
            proxy.heal()


STORES = ("sqlite", "etcd", "postgres")
# The old leader's lock-delay: None is the default; 0 only where it matters.
WAYS: list[tuple[str, float | None]] = [("resign", None), ("kill", None), ("kill", 0.0)]
WAYS += [("partition", None), ("partition", 0.0)]
HOWS = ("resign", "kill", "partition", "native")  # native: etcd's own election API
# A smoke run's parts, side by side, each with its own servers: no two rounds of one part may
# overlap (a partition blackholes the links every leader of that store uses).
SMOKE_PARTS = [
    ["--only", "sqlite"],
    *(["--only", store, "--how", "resign", "--how", "kill"] for store in ("etcd", "postgres")),
    *(["--only", store, "--how", "partition"] for store in ("etcd", "postgres")),
    ["--only", "etcd", "--how", "native"],
]


def shown(times: list[float]) -> str:
    low, high = min(times) * 1000, max(times) * 1000
    return f"{statistics.median(times) * 1000:9.1f} ms ({low:.0f}-{high:.0f})"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ttl", type=float, default=2.0)
    parser.add_argument("--only", choices=STORES, action="append", help="this store (repeatable)")
    parser.add_argument("--how", choices=HOWS, action="append", help="these rows (repeatable)")
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP + "; parts side by side")
    args = parser.parse_args()
    if args.smoke and not args.only:
        return fan_out(__file__, SMOKE_PARTS)
    rounds, hows = 1 if args.smoke else args.rounds, args.how or HOWS
    ttl = SMOKE_TTL if args.smoke else args.ttl
    smoke = Smoke() if args.smoke else None
    tmp = Path(tempfile.mkdtemp(prefix="bench-election-"))
    resource = str(tmp / "resource.db")
    db = sqlite3.connect(resource)
    db.execute("CREATE TABLE log (term INTEGER)")
    SQLFence().ensure_table(db)
    db.close()
    default_delay = tenure.Timing(ttl).lock_delay
    print(f"fail-over, TTL {ttl:g} s, median (min-max) of {rounds} rounds")
    head = ("store", "how", "lock-delay", "to first fenced write", "old leader stopped first by")
    print(f"{head[0]:<12}{head[1]:<11}{head[2]:>11}{head[3]:>24}{head[4]:>30}")
    wanted = args.only or list(STORES)
    with contextlib.ExitStack() as links:
        links.callback(shutil.rmtree, tmp, ignore_errors=True)

        def proxied(url: str, endpoints: list[tuple[str, int]]) -> tuple[str, list[Any]]:
            proxies = [
                links.enter_context(ChaosProxy(h, p).start_in_thread()) for h, p in endpoints
            ]
            return with_endpoints(url, [p.address for p in proxies]), proxies

        stores: list[tuple[str, str, str | None, list[Any]]] = []
        if "sqlite" in wanted:
            stores.append(("sqlite", f"sqlite:///{tmp / 'store.db'}", None, []))
        if "etcd" in wanted:
            etcd = links.enter_context(EtcdCluster(3).start())
            etcd_url = "etcd://" + ",".join(etcd.endpoints)
            stores.append(("etcd", etcd_url, *proxied(etcd_url, endpoints(etcd_url))))
        if "postgres" in wanted and set(hows) - {"native"}:
            pg = links.enter_context(PostgresServer())
            stores.append(("postgres", pg.dsn, *proxied(pg.dsn, endpoints(pg.dsn))))
        for kind, url, leader_url, link in stores:
            for how, delay in WAYS:
                if how not in hows or (how == "partition" and not link):
                    continue
                results = [
                    one_round(url, leader_url or url, how, ttl, delay, resource, link)
                    for _ in range(rounds)
                ]
                times = [r[0] for r in results]
                gaps = [r[1] for r in results if r[1] is not None]
                gap = f"{min(gaps) * 1000:.0f} ms (min)" if gaps else "-"
                held = f"{default_delay if delay is None else delay:g} s"
                print(f"{kind:<12}{how:<11}{held:>11}{shown(times):>24}{gap:>30}", flush=True)
                if smoke is not None:
                    row = f"{kind} {how} lock-delay {held}"
                    smoke.number(row, statistics.median(times))
                    if how == "partition":
                        smoke.number(f"{row}: the old leader stopped first by", min(gaps or [None]))
        if "etcd" in wanted and "native" in hows:
            base = "http://" + etcd.endpoints[0]
            for how in ("resign", "kill"):
                times = [native_round(base, how, ttl, resource) for _ in range(rounds)]
                print(f"{'etcd-native':<12}{how:<11}{'-':>11}{shown(times):>24}{'never told':>30}")
                if smoke is not None:
                    smoke.number(f"etcd-native {how}", statistics.median(times))
    return 0 if smoke is None else smoke.exit_code()


if __name__ == "__main__":
    sys.exit(main())
