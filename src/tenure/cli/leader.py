"""``tenure leader NAME [--watch]``: who leads an election now, or every change as it happens."""

from __future__ import annotations

import json

import click

import tenure
from tenure.checks import check_name

from . import EXIT_NOT_HELD, EXIT_OK, EXIT_SIGNAL_BASE, store_option
from .ls import shown


def _text(name: str, leader: tenure.Leader | None) -> str:
    if leader is None:
        return f"{shown(name)}: no leader"
    owner = leader.holder
    label = f" ({shown(owner.label)})" if owner.label else ""
    value = "-" if leader.value is None else shown(leader.value)
    return (
        f"{shown(name)}: term {leader.term} value {value} held by {shown(owner.host)} "
        f"pid {owner.pid}{label}"
    )


def _json(name: str, leader: tenure.Leader | None) -> str:
    if leader is None:
        return json.dumps({"name": name, "leader": None})
    owner = leader.holder
    return json.dumps(
        {
            "name": name,
            "leader": {
                "term": leader.term,
                "value": leader.value,
                "host": owner.host,
                "pid": owner.pid,
                "label": owner.label,
            },
        }
    )


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.argument("name")
@click.option("--watch", is_flag=True, help="Print a line per change until interrupted.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@store_option
def leader(name: str, watch: bool, as_json: bool, store: str | None) -> int:
    """Print the current leader of election NAME (exit 1 if nobody leads)."""
    check_name(name)
    show = _json if as_json else _text
    with tenure.connect(store) as client:
        if not watch:
            now = client.election(name).leader()
            click.echo(show(name, now))
            return EXIT_OK if now is not None else EXIT_NOT_HELD
        try:
            for now in client.election(name).observe():
                click.echo(show(name, now))
        except KeyboardInterrupt:
            return EXIT_SIGNAL_BASE + 2
    return EXIT_OK
