"""Every `tenure chaos` scenario on every store, fenced and unfenced, with fixed seeds: the
table of results in docs/chaos.md.

    .venv/bin/python scripts/chaos_matrix.py [--seconds 12] [--ttl 1] [--seed 1] [--out DIR]
        [--scenario NAME]… [--store sqlite|etcd|postgres|zookeeper|redis]… [--workload run]

``--workload run``: the workers are ``tenure run`` supervisors and one run per scenario and store
gives its ``work-overlap`` findings (commands check no token: fenced or not does not apply), for
the scenarios of `RUN_SCENARIOS` unless --scenario names others.

Starts its own SQLite file, 3-member etcd cluster, PostgreSQL server, 3-server ZooKeeper
ensemble and Redis primary with a replica (loopback, temporary directories; only the stores
asked for), prints one Markdown row per scenario and store, and writes every run's report,
history and timeline under --out.
"""

from __future__ import annotations

import argparse
import tempfile
import uuid
from argparse import Namespace
from pathlib import Path
from urllib.parse import urlsplit

from tenure._errors import InvalidArgument
from tenure.chaos import SCENARIOS, Report, Run, Scenario
from tenure.chaos.checks import work_overlaps
from tenure.chaos.history import read_work
from tenure.chaos.runner import check_applicable
from tenure.chaos.servers import ServerControl, launch
from tenure.stores._registry import BY_KEY, REGISTRY

KINDS = tuple(entry.key for entry in REGISTRY if entry.throwaway is not None)
RUN_SCENARIOS = (
    "smoke",
    "partition",
    "short-partition",
    "lost-reply",
    "clock-drift",
    "leader-kill",
    "group-pause",
    "long-group-pause",
)


def overlap_cell(out: Path) -> str:
    overlaps = [length for _, _, length in work_overlaps(read_work(out / "work"))]
    if not overlaps:
        return "0"
    return f"**{len(overlaps)}** (longest {max(overlaps) * 1000:.0f} ms)"


def cell(report: Report) -> str:
    bad = {kind: n for kind, n in report.violations.items() if n}
    found = ", ".join(f"**{kind} {n}**" for kind, n in bad.items()) or "0"
    return f"{found} ({report.grants} grants, {report.refused} refused)"


def next_grant(report: Report) -> str:
    return f"{max(report.next_grant):.2f} s" if report.next_grant else "–"


def fresh_url(kind: str, control: ServerControl | None, sqlite_file: Path) -> str:
    """The store's URL with a namespace of its own for one scenario."""
    entry = BY_KEY[kind]
    if control is None:
        return entry.namespaced(f"{entry.schemes[0]}:///{sqlite_file.parent}", sqlite_file.stem)
    return entry.namespaced(control.url, f"m_{uuid.uuid4().hex[:8]}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--ttl", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="chaos-matrix-")))
    parser.add_argument("--scenario", action="append", help="only these (default: all)")
    parser.add_argument("--store", action="append", choices=KINDS, help="only these")
    parser.add_argument("--workload", choices=("counter", "run"), default="counter")
    args = parser.parse_args()
    commands = args.workload == "run"
    wanted = args.scenario or (RUN_SCENARIOS if commands else list(SCENARIOS))
    kinds = args.store or KINDS
    controls: dict[str, ServerControl] = {
        kind: launch(kind) for kind in kinds if BY_KEY[kind].throwaway == "server"
    }
    if commands:
        print("| scenario | store | faults | work-overlap | commands (worked / started) | exits |")
        print("|---|---|---|---|---|---|")
    else:
        print(
            "| scenario | store | faults (fenced run) | fenced: violations | next grant (max) |"
            " unfenced: violations |"
        )
        print("|---|---|---|---|---|---|")
    try:
        for server in controls.values():
            server.start()
        for scenario in SCENARIOS.values():
            if scenario.name not in wanted:
                continue
            for kind in kinds:
                control = controls.get(kind)
                url = fresh_url(kind, control, args.out / f"{scenario.name}.db")
                try:
                    check_applicable(scenario, urlsplit(url).scheme, control is not None)
                except InvalidArgument:
                    continue
                if commands:
                    run_commands(scenario, kind, url, control, args)
                    continue
                reports = []
                for fenced in (True, False):
                    mode = "fenced" if fenced else "unfenced"
                    run = Run(
                        scenario, url, args.out / f"{scenario.name}-{kind}-{mode}",
                        workers_count=args.workers, ttl=args.ttl, seconds=args.seconds,
                        seed=args.seed, fenced=fenced, control=control,
                    )  # fmt: skip
                    reports.append(run.execute())
                    if control is not None:
                        control.heal()
                faults = ", ".join(f"{k} {n}" for k, n in reports[0].faults.items()) or "none"
                print(
                    f"| {scenario.name} | {kind} | {faults} | {cell(reports[0])} |"
                    f" {next_grant(reports[0])} | {cell(reports[1])} |",
                    flush=True,
                )
    finally:
        for server in controls.values():
            server.close()
    print(f"\nruns: {args.out}")


def run_commands(
    scenario: Scenario, kind: str, url: str, control: ServerControl | None, args: Namespace
) -> None:
    out = args.out / f"{scenario.name}-{kind}-run"
    report = Run(
        scenario, url, out, workers_count=args.workers,
        ttl=args.ttl, seconds=args.seconds, seed=args.seed, workload="run", control=control,
    ).execute()  # fmt: skip
    if control is not None:
        control.heal()
    faults = ", ".join(f"{k} {n}" for k, n in report.faults.items()) or "none"
    worked = f"{report.commands['worked']} / {report.commands['started']}"
    exits = ", ".join(
        f"{k.removeprefix('exit ')}: {n}"
        for k, n in sorted(report.commands.items())
        if k.startswith("exit")
    )
    print(
        f"| {scenario.name} | {kind} | {faults} | {overlap_cell(out)} | {worked} | {exits} |",
        flush=True,
    )


if __name__ == "__main__":
    main()
