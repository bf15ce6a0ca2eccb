"""``tenure chaos``: run a fault-injection scenario against a store and check what the protected
resource accepted. Exit status 0: no violation found; 1: at least one (see the report)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import click

from tenure import InvalidArgument
from tenure.stores import StoreEntry, by_key, entries

from ..chaos.report import Report
from ..chaos.runner import Run, check_applicable, new_seed
from ..chaos.scenarios import SCENARIOS
from ..chaos.servers import ServerControl, launch
from ..chaos.workloads import NAMES as WORKLOADS
from . import EXIT_UNAVAILABLE, EXIT_VIOLATION, error, one_line, store_option


def _kinds() -> str:
    """The --cluster kinds, as the help and the errors name them (from the store registry)."""
    return ", ".join(
        f"{e.key}[:N]" if e.members else e.key for e in entries() if e.throwaway is not None
    )


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--scenario",
    "scenarios",
    type=click.Choice(list(SCENARIOS)),
    multiple=True,
    help="Which faults to inject; repeat to run several (default: pause; --list describes them).",
)
@store_option
@click.option(
    "--cluster",
    metavar="KIND",
    help=f"Start a throw-away store for the run instead: {_kinds()} (N members, 1-7; redis: a"
    " primary and an asynchronous replica behind one address) (default when --store is not"
    " given: sqlite).",
)
@click.option("--workload", type=click.Choice(WORKLOADS), default="counter", show_default=True)
@click.option("--workers", type=click.IntRange(2, 32), default=5, show_default=True)
@click.option("--ttl", type=click.FloatRange(0.2, 60), default=1.0, show_default=True)
@click.option(
    "--lock-delay", type=click.FloatRange(0, 60), default=None, metavar="S",
    help="The workers' lock-delay (default: --workload run: tenure run's, one TTL; others: 0).",
)  # fmt: skip
@click.option(
    "--seconds", type=click.FloatRange(3, 3600), default=15.0, show_default=True,
    help="How long the workers run.",
)  # fmt: skip
@click.option("--seed", type=click.IntRange(0), default=None, help="Replay a run's choices.")
@click.option(
    "--runs", type=click.IntRange(1, 1000), default=1, show_default=True,
    help="Runs per scenario (seeds SEED, SEED+1, …).",
)  # fmt: skip
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
    scenarios: tuple[str, ...],
    store: str | None,
    cluster: str | None,
    workload: str,
    workers: int,
    ttl: float,
    lock_delay: float | None,
    seconds: float,
    seed: int | None,
    runs: int,
    unfenced: bool,
    clock_rate: float | None,
    out: Path | None,
    as_json: bool,
    list_only: bool,
) -> int:
    """Run fault-injection scenarios and check the protected resource for violations.

    Workers take one lock and read-modify-write a resource through the fence while the nemesis
    pauses, kills or cuts them off (or faults the store's servers). The checkers then look for
    lost updates, stale tokens accepted, tokens out of order and two leaders in a term. With
    --workload run the workers are tenure run supervisors whose commands record when they work,
    and the checker looks for two commands working at once.
    """
    if list_only:
        for item in SCENARIOS.values():
            click.echo(f"{item.name:14} {item.summary} [{item.needs}]")
        return 0
    if store and cluster:
        raise InvalidArgument("give --store or --cluster, not both")
    cluster = cluster or ("" if store else "sqlite")
    scheme = _scheme(store, cluster)
    for name in scenarios:  # before anything is started or written
        check_applicable(SCENARIOS[name], scheme, controlled=scheme != "sqlite" and not store)
    seed = new_seed() if seed is None else seed
    out = out or Path(tempfile.mkdtemp(prefix="tenure-chaos-"))
    plan = [(name, seed + i) for name in scenarios or ("pause",) for i in range(runs)]
    reports: list[Report] = []
    try:
        with _store(store, cluster, out) as (url, control):
            for name, run_seed in plan:
                run_dir = out if len(plan) == 1 else out / f"{name}-{run_seed}"
                report = Run(
                    SCENARIOS[name], url, run_dir, workers_count=workers, ttl=ttl,
                    seconds=seconds, seed=run_seed, fenced=not unfenced, workload=workload,
                    clock_rate=clock_rate, control=control, lock_delay=lock_delay,
                ).execute()  # fmt: skip
                reports.append(report)
                if not as_json:
                    click.echo(report.to_text())
                    click.echo(f"report, history and timeline: {run_dir}\n")
    except (RuntimeError, OSError) as exc:  # a server that would not start, a missing binary
        error(f"cannot run the scenario: {one_line(str(exc))}")
        return EXIT_UNAVAILABLE
    failed = [r for r in reports if not r.passed]
    if as_json:
        documents = [r.to_json() for r in reports]
        click.echo(json.dumps(documents[0] if len(documents) == 1 else documents, indent=2))
    elif len(reports) > 1:
        click.echo(
            f"{len(reports)} runs: {len(reports) - len(failed)} passed, {len(failed)} failed"
        )
    return EXIT_VIOLATION if failed else 0


def _cluster(cluster: str) -> tuple[StoreEntry, int | None]:
    """The store and size a --cluster value names; an unknown one is refused here."""
    kind, _, size = cluster.partition(":")
    entry = by_key().get(kind)
    if entry is not None and entry.throwaway is not None:
        if not size:
            return entry, None
        low, high = entry.members or (0, -1)
        if size.isdigit() and low <= int(size) <= high:
            return entry, int(size)
    raise InvalidArgument(f"unknown --cluster {cluster!r}: use {_kinds()} (N: 1-7)")


def _scheme(url: str | None, cluster: str) -> str:
    """The store's URL scheme; an unknown --cluster is refused here."""
    if url:
        return urlsplit(url).scheme
    return _cluster(cluster)[0].schemes[0]


@contextmanager
def _store(url: str | None, cluster: str, out: Path) -> Iterator[tuple[str, ServerControl | None]]:
    if not cluster:
        assert url is not None
        yield url, None
        return
    entry, members = _cluster(cluster)
    if entry.throwaway == "file":
        yield f"{entry.schemes[0]}:///{out.resolve() / 'store.db'}", None
        return
    control = launch(entry.key, members)
    try:
        control.start()  # a failed start is cleaned up below
        yield control.url, control
    finally:
        control.close()
