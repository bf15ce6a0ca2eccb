"""Every `tenure chaos` scenario on every store, fenced and unfenced, with fixed seeds: the
table of results in docs/chaos.md.

    .venv/bin/python scripts/chaos_matrix.py [--seconds 12] [--ttl 1] [--seed 1] [--out DIR]
        [--scenario NAME]… [--store sqlite|etcd|postgres]…

Starts its own SQLite file, 3-member etcd cluster and PostgreSQL server (loopback, temporary
directories), prints one Markdown row per scenario and store, and writes every run's report,
history and timeline under --out.
"""

from __future__ import annotations

import argparse
import tempfile
import uuid
from pathlib import Path
from urllib.parse import urlsplit

from tenure._errors import InvalidArgument
from tenure.testing.chaos import SCENARIOS, EtcdControl, PostgresControl, Report, Run
from tenure.testing.chaos.runner import check_applicable
from tenure.testing.chaos.servers import ServerControl
from tenure.testing.etcd_cluster import EtcdCluster
from tenure.testing.postgres_server import PostgresServer


def cell(report: Report) -> str:
    bad = {kind: n for kind, n in report.violations.items() if n}
    found = ", ".join(f"**{kind} {n}**" for kind, n in bad.items()) or "0"
    return f"{found} ({report.grants} grants, {report.refused} refused)"


def next_grant(report: Report) -> str:
    return f"{max(report.next_grant):.2f} s" if report.next_grant else "–"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--ttl", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="chaos-matrix-")))
    parser.add_argument("--scenario", action="append", help="only these (default: all)")
    parser.add_argument("--store", action="append", help="only these: sqlite, etcd, postgres")
    args = parser.parse_args()
    etcd = EtcdControl(EtcdCluster(3), owned=True)
    postgres = PostgresControl(PostgresServer(), owned=True)
    stores: list[tuple[str, ServerControl | None]] = [("sqlite", None), ("etcd", etcd)]
    stores.append(("postgres", postgres))
    print(
        "| scenario | store | faults (fenced run) | fenced: violations | next grant (max) |"
        " unfenced: violations |"
    )
    print("|---|---|---|---|---|---|")
    try:
        etcd.start()
        postgres.start()
        for scenario in SCENARIOS.values():
            if args.scenario and scenario.name not in args.scenario:
                continue
            for kind, control in stores:
                if args.store and kind not in args.store:
                    continue
                urls = {
                    "sqlite": f"sqlite:///{args.out / f'{scenario.name}.db'}",
                    "etcd": f"{etcd.url}/m_{uuid.uuid4().hex[:8]}",
                    "postgres": f"{postgres.url}?schema=m_{uuid.uuid4().hex[:8]}",
                }
                url = urls[kind]
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
        etcd.close()
        postgres.close()
    print(f"\nruns: {args.out}")


if __name__ == "__main__":
    main()
