"""Every `tenure chaos` scenario on every store, fenced and unfenced, with fixed seeds: the
table of results in docs/chaos.md.

    .venv/bin/python scripts/chaos_matrix.py [--seconds 12] [--ttl 1] [--seed 1] [--out DIR]
        [--scenario NAME]… [--store sqlite|etcd|postgres|zookeeper|redis]…

Starts its own SQLite file, 3-member etcd cluster, PostgreSQL server, 3-server ZooKeeper
ensemble and Redis primary with a replica (loopback, temporary directories; only the stores
asked for), prints one Markdown row per scenario and store, and writes every run's report,
history and timeline under --out.
"""

from __future__ import annotations

import argparse
import tempfile
import uuid
from pathlib import Path
from urllib.parse import urlsplit

from tenure._errors import InvalidArgument
from tenure.testing.chaos import (
    SCENARIOS,
    EtcdControl,
    PostgresControl,
    RedisControl,
    Report,
    Run,
    ZooKeeperControl,
)
from tenure.testing.chaos.runner import check_applicable
from tenure.testing.chaos.servers import ServerControl
from tenure.testing.etcd_cluster import EtcdCluster
from tenure.testing.postgres_server import PostgresServer
from tenure.testing.zookeeper_ensemble import ZooKeeperEnsemble

KINDS = ("sqlite", "etcd", "postgres", "zookeeper", "redis")


def cell(report: Report) -> str:
    bad = {kind: n for kind, n in report.violations.items() if n}
    found = ", ".join(f"**{kind} {n}**" for kind, n in bad.items()) or "0"
    return f"{found} ({report.grants} grants, {report.refused} refused)"


def next_grant(report: Report) -> str:
    return f"{max(report.next_grant):.2f} s" if report.next_grant else "–"


def fresh_url(kind: str, control: ServerControl | None, sqlite_file: Path) -> str:
    """The store's URL with a namespace of its own for one scenario."""
    namespace = f"m_{uuid.uuid4().hex[:8]}"
    if control is None:
        return f"sqlite:///{sqlite_file}"
    return {
        "etcd": f"{control.url}/{namespace}",
        "zookeeper": f"{control.url}/{namespace}",
        "postgres": f"{control.url}?schema={namespace}",
        "redis": f"{control.url}?prefix={namespace}",
    }[kind]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--ttl", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="chaos-matrix-")))
    parser.add_argument("--scenario", action="append", help="only these (default: all)")
    parser.add_argument("--store", action="append", choices=KINDS, help="only these")
    args = parser.parse_args()
    kinds = args.store or KINDS
    controls: dict[str, ServerControl] = {}
    if "etcd" in kinds:
        controls["etcd"] = EtcdControl(EtcdCluster(3), owned=True)
    if "postgres" in kinds:
        controls["postgres"] = PostgresControl(PostgresServer(), owned=True)
    if "zookeeper" in kinds:
        controls["zookeeper"] = ZooKeeperControl(ZooKeeperEnsemble(3), owned=True)
    if "redis" in kinds:
        controls["redis"] = RedisControl()
    print(
        "| scenario | store | faults (fenced run) | fenced: violations | next grant (max) |"
        " unfenced: violations |"
    )
    print("|---|---|---|---|---|---|")
    try:
        for server in controls.values():
            server.start()
        for scenario in SCENARIOS.values():
            if args.scenario and scenario.name not in args.scenario:
                continue
            for kind in kinds:
                control = controls.get(kind)
                url = fresh_url(kind, control, args.out / f"{scenario.name}.db")
                try:
                    check_applicable(scenario, urlsplit(url).scheme, control is not None)
                except InvalidArgument:
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


if __name__ == "__main__":
    main()
