"""``tenure history NAME``: one row per recorded slot of a job (``tenure once`` / ``cron``)."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime, timezone

import click

from tenure import SlotRecord

from . import columns, open_client, store_option
from .ls import shown


def _time(t: float | None) -> str:
    if t is None:
        return "-"
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _row(slot: SlotRecord) -> list[str]:
    duration = "-" if slot.duration is None else f"{slot.duration:.1f}s"
    code = "-" if slot.exit_code is None else str(slot.exit_code)
    who = shown(slot.server) + (f" ({shown(slot.label)})" if slot.label else "")
    started = _time(slot.started)
    return [shown(slot.slot), slot.state, who, str(slot.token), str(slot.attempts), started,
            duration, code]  # fmt: skip


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per slot, one per line.")
@click.option("--last", type=int, default=None, metavar="N", help="Only the last N slots.")
@store_option
def history(name: str, as_json: bool, last: int | None, store: str | None) -> int:
    """Show every recorded slot of job NAME: state, server, token, attempts, start (UTC),
    duration and exit code."""
    client = open_client(store, "", None, quiet=True)
    try:
        slots = client.history(name)
    finally:
        client.close()
    if last is not None:
        slots = slots[-last:] if last > 0 else []
    if as_json:
        for slot in slots:
            click.echo(json.dumps({**asdict(slot), "duration": slot.duration}, sort_keys=True))
        return 0
    if not slots:
        click.echo(f"no recorded slots of {name!r}", err=True)
        return 0
    header = ["SLOT", "STATE", "SERVER", "TOKEN", "ATTEMPTS", "STARTED (UTC)", "TOOK", "EXIT"]
    click.echo(columns([header] + [_row(slot) for slot in slots]))
    return 0
