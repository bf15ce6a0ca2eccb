"""``tenure chaos``: run a fault-injection scenario against a store and check what the protected
resource accepted. Exit status 0: no violation found; 1: at least one (see the report)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from .._errors import InvalidArgument
from ..testing.chaos.resource import WORKLOADS
from ..testing.chaos.runner import Run, new_seed
from ..testing.chaos.scenarios import SCENARIOS
from ..testing.chaos.servers import EtcdControl, PostgresControl, ServerControl
from . import EXIT_UNAVAILABLE, EXIT_VIOLATION, error, one_line, store_option


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--scenario",
    type=click.Choice(list(SCENARIOS)),
    default="pause",
    show_default=True,
    help="Which faults to inject (--list describes them).",
)
@store_option
@click.option(
    "--cluster",
    metavar="KIND",
    help="Start a throw-away store for the run instead: sqlite, etcd[:MEMBERS] or postgres "
    "(default when --store is not given: sqlite).",
)
@click.option("--workload", type=click.Choice(WORKLOADS), default="counter", show_default=True)
@click.option("--workers", type=click.IntRange(2, 32), default=5, show_default=True)
@click.option("--ttl", type=click.FloatRange(0.2, 60), default=1.0, show_default=True)
@click.option(
    "--seconds", type=click.FloatRange(3, 3600), default=15.0, show_default=True,
    help="How long the workers run.",
)  # fmt: skip
@click.option("--seed", type=click.IntRange(0), default=None, help="Replay a run's choices.")
@click.option(
    "--unfenced",
    is_flag=True,
    help="The positive control: the resource does not check tokens (expect violations).",
)
@click.option(
    "--clock-rate",
    type=click.FloatRange(0.1, 10),
    default=None,
    help="Run the workers' lease clocks at this rate (default: the scenario's, 1 = true).",
)
@click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="Directory for report.json, history.jsonl and timeline.html (default: a new temp dir).",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--list", "list_only", is_flag=True, help="List the scenarios and exit.")
def chaos(
    scenario: str,
    store: str | None,
    cluster: str | None,
    workload: str,
    workers: int,
    ttl: float,
    seconds: float,
    seed: int | None,
    unfenced: bool,
    clock_rate: float | None,
    out: Path | None,
    as_json: bool,
    list_only: bool,
) -> int:
    """Run a fault-injection SCENARIO and check the resource for violations.

    Workers take one lock and read-modify-write a resource through the fence while the nemesis
    pauses, kills or cuts them off (or faults the store's servers). The checkers then look for
    lost updates, stale tokens accepted, tokens out of order and two leaders in a term.
    """
    if list_only:
        for item in SCENARIOS.values():
            click.echo(f"{item.name:14} {item.summary} [{item.needs}]")
        return 0
    if store and cluster:
        raise InvalidArgument("give --store or --cluster, not both")
    seed = new_seed() if seed is None else seed
    out = out or Path(tempfile.mkdtemp(prefix="tenure-chaos-"))
    try:
        with _store(store, cluster or ("" if store else "sqlite"), out) as (url, control):
            report = Run(
                SCENARIOS[scenario], url, out, workers_count=workers, ttl=ttl, seconds=seconds,
                seed=seed, fenced=not unfenced, workload=workload, clock_rate=clock_rate,
                control=control,
            ).execute()  # fmt: skip
    except (RuntimeError, OSError) as exc:  # a server that would not start, a missing binary
        error(f"cannot run the scenario: {one_line(str(exc))}")
        return EXIT_UNAVAILABLE
    (out / "report.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        click.echo(report.to_text())
        click.echo(f"report, history and timeline: {out}")
    return 0 if report.passed else EXIT_VIOLATION


@contextmanager
def _store(url: str | None, cluster: str, out: Path) -> Iterator[tuple[str, ServerControl | None]]:
    kind, _, members = cluster.partition(":")
    if not cluster:
        assert url is not None
        yield url, None
        return
    if kind == "sqlite" and not members:
        yield f"sqlite:///{out.resolve() / 'store.db'}", None
        return
    control: ServerControl
    if kind == "etcd" and (not members or (members.isdigit() and 1 <= int(members) <= 7)):
        from ..testing.etcd_cluster import EtcdCluster

        control = EtcdControl(EtcdCluster(int(members or 3)), owned=True)
    elif kind == "postgres" and not members:
        from ..testing.postgres_server import PostgresServer

        control = PostgresControl(PostgresServer(), owned=True)
    else:
        raise InvalidArgument(
            f"unknown --cluster {cluster!r}: use sqlite, etcd, etcd:MEMBERS (1-7) or postgres"
        )
    try:
        control.start()  # a failed start is cleaned up below
        yield control.url, control
    finally:
        control.close()
