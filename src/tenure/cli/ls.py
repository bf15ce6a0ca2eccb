"""``tenure ls [NAME]``: who holds which lock now, as a table, in detail, or as JSON."""

from __future__ import annotations

import json
from dataclasses import asdict

import click

import tenure

from .._names import check_name
from ..stores._spi import LockInfo
from . import EXIT_NOT_HELD, EXIT_OK, columns, store_option

COLUMNS = ("NAME", "TOKEN", "HOLDER", "EXPIRES", "WAITERS")


def shown(text: str) -> str:
    """Names and labels come from other processes: never print control characters raw."""
    return text if text.isprintable() else repr(text)


def holder(info: LockInfo) -> str:
    owner = info.owner
    label = f" ({shown(owner.label)})" if owner.label else ""
    return f"{shown(owner.host)} pid {owner.pid}{label}"


def table(infos: list[LockInfo]) -> str:
    rows = [COLUMNS] + [
        (
            shown(info.name),
            str(info.token),
            holder(info),
            f"{max(0.0, info.expires_in):.1f}s",
            str(info.waiters),
        )
        for info in infos
    ]
    return columns(rows)


def detail(info: LockInfo) -> str:
    owner = info.owner
    lines = [
        ("lock", shown(info.name)),
        ("token", str(info.token)),
        ("host", shown(owner.host)),
        ("pid", str(owner.pid)),
        ("label", shown(owner.label) if owner.label else "-"),
        ("expires", f"in {max(0.0, info.expires_in):.1f}s unless renewed"),
        ("waiters", str(info.waiters)),
    ]
    return "\n".join(f"{key + ':':<9}{value}" for key, value in lines)


def _as_json(info: LockInfo) -> dict[str, object]:
    data = asdict(info)
    data["expires_in"] = round(info.expires_in, 3)
    return data


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("name", required=False)
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, for scripts.")
def ls(name: str | None, store: str | None, as_json: bool) -> int:
    """Show who holds each lock: token, holder (host, pid, label), time left, waiters.

    With NAME, show that one lock in detail; exit 1 if it is not held.

    \b
    --json prints a list of objects (empty if nothing is held):
      {"name", "token", "owner": {"host", "pid", "label"}, "expires_in", "waiters"}
    """
    if name is not None:
        check_name(name)
    client = tenure.connect(store)
    try:
        infos = client.locks(name)
    finally:
        client.close()
    if as_json:
        click.echo(json.dumps([_as_json(info) for info in infos], indent=2))
    elif name is not None:
        click.echo(detail(infos[0]) if infos else f"lock {name!r} is not held")
    else:
        click.echo(table(infos) if infos else "no locks held")
    return EXIT_NOT_HELD if name is not None and not infos else EXIT_OK


__all__ = ["detail", "ls", "table"]
