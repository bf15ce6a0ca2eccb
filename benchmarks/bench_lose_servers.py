"""The drill "lose 3 of 7 servers, the store's leader among them: under 2 % errors".

    .venv/bin/python benchmarks/bench_lose_servers.py                      # the full set (~40 min)
    .venv/bin/python benchmarks/bench_lose_servers.py --only zookeeper     # on ZooKeeper (~12 min)
    .venv/bin/python benchmarks/bench_lose_servers.py --only sweep         # one part of it
    .venv/bin/python benchmarks/bench_lose_servers.py --mode kill --load 0.5 --seconds 60
    .venv/bin/python benchmarks/bench_lose_servers.py --smoke    # does it work? (CI), ~20 s

Seven servers on loopback, each one etcd member (or ZooKeeper server) and one partition worker;
64 partitions; a load generator puts requests into a PostgreSQL queue at a fixed rate; the
partition's owner must process each within 2 s, fenced by the partition's token; each worker
can do 10 a second. After a warm-up, 3 servers fail at once — the store's leader among them —
killed (SIGKILL) or cut off (every packet dropped by the kernel: needs root and nft), and come
back later. See `tenure_tools.drill` for what is measured.

The full set:

- ``main``: 5-minute runs at 50 % load, killed and cut off (two failures of 60 s each);
- ``short``: the same as 60 s runs (one failure of 20 s);
- ``sweep``: 60 s runs at 30, 50, 60 and 70 % load, killed and cut off;
- ``majority``: 5 members losing 3 — no quorum: tenure must fail closed, and recover alone;
- ``zookeeper``: the ``main`` runs on a 7-server ZooKeeper ensemble (not part of the full set).

It prints a table, writes every run's JSON to ``--out`` (default ``benchmarks/results/``) and
draws the timeline of the first ``main`` run (``--picture``; needs matplotlib, from the
``bench`` extra).

``--smoke`` runs two tiny drills side by side — 1 of 3 servers killed on etcd, 1 of 3 cut off on
ZooKeeper (killed instead, said in one line, where cutting needs what is missing: root, nft) — for
4.5 s each, writes their JSON to a temporary directory, reads it back and draws the picture.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from _common import SMOKE_HELP, Smoke, fan_out, skip_line
from tenure_tools import fabric
from tenure_tools.drill import Drill, DrillConfig, DrillResult, EventResult, Mode
from tenure_tools.drill_cluster import STORES, Store

HERE = Path(__file__).parent

PLANS: dict[str, list[DrillConfig]] = {
    "main": [
        DrillConfig(mode="kill", load=0.5, seconds=300, events=2),
        DrillConfig(mode="cut", load=0.5, seconds=300, events=2),
    ],
    "short": [DrillConfig(mode=m, load=0.5, seconds=60) for m in ("kill", "cut")],
    "sweep": [
        DrillConfig(mode=m, load=load, seconds=60)
        for m in ("kill", "cut")
        for load in (0.3, 0.5, 0.6, 0.7)
    ],
    "majority": [DrillConfig(servers=5, mode=m, load=0.5, seconds=60) for m in ("kill", "cut")],
}
ON_REQUEST = {
    "zookeeper": [
        DrillConfig(store="zookeeper", mode=m, load=0.5, seconds=300, events=2)
        for m in ("kill", "cut")
    ],
}


def ms(pair: object) -> str:
    return "—" if not isinstance(pair, (list, tuple)) else f"{pair[0]:.0f} / {pair[1]:.0f}"


def seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f}"


def table(results: list[DrillResult]) -> str:
    head = (
        "| store | servers | lose | how | load | run | requests | errors | per event"
        " | owned again s | leader s | p50/p99 ms before | during | after | owned twice"
        " | stale accepted (refused) |"
    )
    lines = [head, "|" + "---|" * 16]
    for r in results:
        c = r.config
        lines.append(
            f"| {c.store} | {c.servers} | {c.lose} | {c.mode} | {c.load:.0%} | {c.seconds:.0f} s"
            f" | {r.requests} | {r.errors} ({r.error_rate:.2%})"
            f" | {', '.join(str(e.errors) for e in r.events)}"
            f" | {', '.join(seconds(e.owned_again) for e in r.events)}"
            f" | {', '.join(seconds(e.leader_again) for e in r.events)}"
            f" | {ms(r.latency_ms['before'])} | {ms(r.latency_ms['during'])}"
            f" | {ms(r.latency_ms['after'])} | {r.owned_twice}"
            f" | {r.stale_accepted} ({r.stale_refused}) |"
        )
    return "\n".join(lines)


def picture(result: DrillResult, path: Path) -> None:
    """Requests a second (offered, in time), errors and ownership moves, the failures shaded."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text as text: a small file
    import matplotlib.pyplot as plt

    t = [row["t"] for row in result.timeline]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 5), sharex=True, height_ratios=[3, 1])
    top.plot(t, [row["offered"] for row in result.timeline], label="offered", color="0.6")
    top.plot(t, [row["ok"] for row in result.timeline], label="processed in time", color="C2")
    top.plot(t, [row["errors"] for row in result.timeline], label="errors", color="C3")
    bottom.bar(t, [row["moves"] for row in result.timeline], color="C0", width=1.0)
    for event in result.events:
        for axis in (top, bottom):
            axis.axvspan(event.failed_at, event.restored_at, color="C3", alpha=0.08)
    c = result.config
    top.set_title(
        f"{c.lose} of {c.servers} servers {'killed' if c.mode == 'kill' else 'cut off'}"
        f" (the {c.store} leader's among them), {c.load:.0%} load: {result.error_rate:.2%} errors"
    )
    top.set_ylabel("requests / s")
    top.legend(loc="lower left")
    bottom.set_ylabel("grants / s")
    bottom.set_xlabel("seconds (shaded: servers down)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def load(path: Path) -> DrillResult:
    """A run's result as `DrillResult.to_json` wrote it."""
    data = json.loads(path.read_text())
    data.pop("error_rate")
    config = DrillConfig(**data.pop("config"))
    events = [EventResult(**e) for e in data.pop("events")]
    return DrillResult(config=config, events=events, **data)


def smoke_parts() -> list[list[str]]:
    """The smoke run's two drills: each mode once, each store once."""
    cut = "cut"
    why = fabric.unavailable()
    if why is not None:
        print(skip_line("the cut drill", f"{why}: ZooKeeper's drill kills instead"), flush=True)
        cut = "kill"
    return [["--mode", "kill", "--store", "etcd"], ["--mode", cut, "--store", "zookeeper"]]


def smoke_drill(mode: Mode, store: Store) -> DrillConfig:
    """One tiny drill: 1 of 3 servers fails for 1.5 s of 4.5, 6 partitions, TTL 1.5 s, deadline
    1 s."""
    return DrillConfig(
        servers=3, lose=1, mode=mode, store=store, seconds=4.5, partitions=6, ttl=1.5, deadline=1.0
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=sorted({**PLANS, **ON_REQUEST}), action="append")
    parser.add_argument("--mode", choices=("kill", "cut"), help="one run of your own")
    parser.add_argument("--store", choices=STORES, default="etcd")
    parser.add_argument("--load", type=float, default=0.5)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--events", type=int, default=1)
    parser.add_argument("--servers", type=int, default=7)
    parser.add_argument("--lose", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--picture", type=Path, default=None)
    parser.add_argument("--skip", type=int, default=0, help="start at the plan's n+1-th run")
    parser.add_argument("--draw", type=Path, help="only draw --picture from a run's JSON")
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP + "; two tiny drills")
    args = parser.parse_args(argv)
    if args.smoke and not args.mode:  # a process each: a fabric's table is named by its pid
        return fan_out(__file__, smoke_parts())
    if not 0 < args.load <= 1 or not 0 < args.lose < args.servers or args.seconds <= 0:
        parser.error("need 0 < --load <= 1, 0 < --lose < --servers and --seconds > 0")
    if args.draw:
        picture(load(args.draw), args.picture or args.draw.with_suffix(".svg"))
        return 0
    if args.smoke:
        plan = [smoke_drill(args.mode, args.store)]
        args.out = Path(tempfile.mkdtemp(prefix="tenure-drill-smoke-"))
    elif args.mode:
        plan = [
            DrillConfig(
                servers=args.servers, lose=args.lose, mode=args.mode, load=args.load,
                seconds=args.seconds, events=args.events, store=args.store,
            )
        ]  # fmt: skip
    else:
        plans = {**PLANS, **ON_REQUEST}
        plan = [c for name in args.only or list(PLANS) for c in plans[name]]
    args.out.mkdir(parents=True, exist_ok=True)
    results, saved = [], []
    for n, config in enumerate(plan):
        if n < args.skip:
            continue
        c = config
        store = "" if c.store == "etcd" else f"{c.store}-"  # etcd's names as they were
        name = f"{store}{c.servers}-lose{c.lose}-{c.mode}-{c.load:.0%}-{c.seconds:.0f}s"
        print(f"[{n + 1}/{len(plan)}] {name} …", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(prefix="tenure-drill-") as root:
            result = Drill(replace(config), Path(root)).run()
        results.append(result)
        saved.append(args.out / f"{name.replace('%', 'pct')}.json")
        saved[-1].write_text(result.to_json())
        print(table([result]).splitlines()[-1], file=sys.stderr, flush=True)
        if args.picture is not None and config.seconds >= 300 and n == 0:
            picture(result, args.picture)
    print(table(results))
    for r in results:
        for finding in r.findings:
            print(f"FINDING ({r.config.mode}, {r.config.load:.0%}): {finding}")
    unsafe = any(r.owned_twice or r.stale_accepted for r in results)
    if args.smoke:
        return smoke_verdict(results, saved, args.out) or int(unsafe)
    return 1 if unsafe else 0


def smoke_verdict(results: list[DrillResult], saved: list[Path], out: Path) -> int:
    """Each run's error rate is a number, and its JSON reads back into a picture."""
    smoke = Smoke()
    for r, path in zip(results, saved, strict=True):
        c = r.config
        smoke.number(f"{c.store} {c.mode} {c.lose} of {c.servers}", r.error_rate)
        drawn = path.with_suffix(".svg")
        picture(load(path), drawn)
        smoke.number(f"{c.store} {c.mode} picture, bytes", drawn.stat().st_size)
    shutil.rmtree(out, ignore_errors=True)
    return smoke.exit_code()


if __name__ == "__main__":
    sys.exit(main())
