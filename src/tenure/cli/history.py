"""``tenure history [JOB]``: one row per recorded slot of a job (``tenure once`` / ``cron``), or
without JOB one row per job that has records."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime, timezone

import click

import tenure
from tenure import SlotRecord
from tenure.checks import check_name

from . import columns, open_client, store_option
from .ls import shown

GONE = "running (runner gone)"
"""A slot recorded ``running`` whose claim's lock nobody holds: its runner died or lost its
lease before recording an end; the next claimant runs it again or marks it failed."""


def _time(t: float | None) -> str:
    if t is None:
        return "-"
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _exit(slot: SlotRecord) -> str:
    """The exit code, or ``-`` when there is none: still running, its runner died, or a
    function raised (recorded with an error, not a code)."""
    if slot.exit_code is None or (slot.error is not None and slot.exit_code == 0):
        return "-"
    return str(slot.exit_code)


def _row(slot: SlotRecord, gone: bool) -> list[str]:
    duration = "-" if slot.duration is None else f"{slot.duration:.1f}s"
    who = shown(slot.server) + (f" ({shown(slot.label)})" if slot.label else "")
    state = GONE if gone else slot.state
    error = "-" if slot.error is None else shown(slot.error)
    return [shown(slot.slot), state, who, str(slot.token), str(slot.attempts),
            _time(slot.started), duration, _exit(slot), error]  # fmt: skip


def runners_gone(client: tenure.Client, job: str) -> tuple[list[SlotRecord], set[str]]:
    """The job's slots, and those recorded ``running`` whose runner is gone: no lock is held
    with the token of the attempt that wrote the record. Read record, locks, record again, so
    that a runner that recorded its end meanwhile is not taken for a dead one."""
    first = client.history(job)
    running = [slot for slot in first if slot.state == "running"]
    if not running:
        return first, set()
    prefix = running[0].lock.removesuffix(running[0].slot)  # the job's slot locks
    held = {(info.name, info.token) for info in client.locks(prefix=prefix)}
    again = {slot.slot: slot for slot in client.history(job)}
    gone = {
        slot.slot
        for slot in running
        if again.get(slot.slot) == slot and (slot.lock, slot.token) not in held
    }
    return [again.get(slot.slot, slot) for slot in first], gone


def _jobs(client: tenure.Client, as_json: bool) -> int:
    rows = [["JOB", "SLOTS", "LAST SLOT", "STATE"]]
    for job in client.jobs():
        slots, gone = runners_gone(client, job)
        if not slots:
            continue
        last = slots[-1]
        state = GONE if last.slot in gone else last.state
        if as_json:
            data = {"job": job, "slots": len(slots), "last": last.slot, "state": last.state}
            click.echo(json.dumps({**data, "runner_gone": last.slot in gone}))
        rows.append([shown(job), str(len(slots)), shown(last.slot), state])
    if not as_json:
        if len(rows) == 1:
            click.echo("no job has recorded slots", err=True)
        else:
            click.echo(columns(rows))
    return 0


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.argument("name", metavar="[JOB]", required=False)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per slot (or job) a line.")
@click.option(
    "--last", type=click.IntRange(min=1), default=None, metavar="N", help="Only the last N slots."
)
@store_option
def history(name: str | None, as_json: bool, last: int | None, store: str | None) -> int:
    """Show every recorded slot of job JOB: state, server, token, attempts, start (UTC),
    duration, exit code and error. A slot recorded running whose claim's lock nobody holds is
    shown as "running (runner gone)": its runner died or lost its lease.

    Without JOB, list the jobs that have records: slots recorded, the last slot and its state.
    """
    if name is not None:
        check_name(name)
    elif last is not None:
        raise click.UsageError("--last needs a JOB")
    client = open_client(store, "", None, quiet=True)
    try:
        if name is None:
            return _jobs(client, as_json)
        slots, gone = runners_gone(client, name)
    finally:
        client.close()
    if last is not None:
        slots = slots[-last:]
    if as_json:
        for slot in slots:
            data = {**asdict(slot), "duration": slot.duration, "runner_gone": slot.slot in gone}
            click.echo(json.dumps(data, sort_keys=True))
        return 0
    if not slots:
        click.echo(f"no recorded slots of {name!r}", err=True)
        return 0
    header = ["SLOT", "STATE", "SERVER", "TOKEN", "ATTEMPTS", "STARTED (UTC)", "TOOK", "EXIT",
              "ERROR"]  # fmt: skip
    click.echo(columns([header] + [_row(slot, slot.slot in gone) for slot in slots]))
    return 0
