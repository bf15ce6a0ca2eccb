"""``tenure partitions GROUP [--watch]``: the map of a partition group — its members and which
member owns each item now — or the map again each time it changes."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable
from dataclasses import asdict
from typing import Any

import anyio
import click

import tenure
from tenure import Holder, LockInfo

from . import EXIT_NOT_HELD, EXIT_OK, EXIT_SIGNAL_BASE, columns, store_option
from .ls import shown
from .watching import REREAD, changes, on_interrupt

Map = dict[str, Any]


def read_map(group: str, locks: Iterable[LockInfo]) -> Map:
    """The map of partition group ``group`` from the store's locks (``client.locks()``), as
    ``--json`` prints it: the members (holders of ``partitions/<group>/member/<id>``, with the
    weight each proclaimed, None while it joins) by id, and the items held now
    (``partitions/<group>/item/<item>``) by name. An item's ``member`` is the member whose
    session holds it (a member's lock and its items share a session, so a holder); a list of
    ids if one process runs several
    members with one label, None if no member's session holds it. Pure: no store, no clock."""
    infos = sorted(locks, key=lambda info: info.name)
    names = tenure.PartitionLocks(group)
    weights = names.weights(infos)
    member_prefix, item_prefix = names.member(""), names.item("")
    members: list[Map] = []
    items: list[Map] = []
    ids: dict[Holder, list[str]] = {}
    for info in infos:
        if info.name.startswith(member_prefix):
            member, left = info.name[len(member_prefix) :], round(info.expires_in, 3)
            ids.setdefault(info.holder, []).append(member)
            members.append(
                dict(id=member, weight=weights.get(member), **asdict(info.holder), expires_in=left)
            )
    for info in infos:
        if info.name.startswith(item_prefix):
            item, found = info.name[len(item_prefix) :], ids.get(info.holder, [])
            owner = found[0] if len(found) == 1 else found or None
            left = round(info.expires_in, 3)
            items.append(dict(item=item, member=owner, token=info.token, expires_in=left))
    return {"group": group, "members": members, "items": items}


def _settled(now: Map) -> list[list[Map]]:
    """The map but how long its leases have left: what a change of the map changes."""
    parts = (now["members"], now["items"])
    return [[{k: v for k, v in row.items() if k != "expires_in"} for row in p] for p in parts]


def _text(now: Map) -> str:
    def left(row: Map) -> str:
        return f"{max(0.0, row['expires_in']):.1f}s"

    def count(n: int, what: str) -> str:
        return f"{n} {what}{'' if n == 1 else 's'}" if n else f"no {what}s"

    group, members, items = shown(now["group"]), now["members"], now["items"]
    lines = [f"{group}: no members"]
    if members:
        lines = [f"{group}: {count(len(members), 'member')}, {count(len(items), 'item')} owned"]
        rows = [("MEMBER", "WEIGHT", "HOLDER", "EXPIRES")]
        for m in members:
            label = f" ({shown(m['label'])})" if m["label"] else ""
            holder = f"{shown(m['host'])} pid {m['pid']}{label}"
            weight = "-" if m["weight"] is None else f"{m['weight']:g}"  # joining: not yet said
            rows.append((shown(m["id"]), weight, holder, left(m)))
        lines.append(columns(rows))
    if items:
        rows = [("ITEM", "MEMBER", "TOKEN", "EXPIRES")]
        for i in items:
            member = i["member"] if isinstance(i["member"], list) else [i["member"] or "-"]
            owner = " or ".join(shown(m) for m in member)
            rows.append((shown(i["item"]), owner, str(i["token"]), left(i)))
        lines += ["", columns(rows)]
    return "\n".join(lines)


async def _observe(
    client: tenure.AsyncClient, name: str, rung: list[anyio.Event], scope: anyio.CancelScope
) -> None:
    """Set ``rung[0]`` on each change of lock ``name`` until ``scope`` is cancelled; a failed
    watch is tried again after a nap (the loop reads anyway, and reports a store gone)."""
    with scope:
        while True:
            with contextlib.suppress(tenure.TenureError):
                async for _leader in client.election(name).observe():
                    rung[0].set()
            await anyio.sleep(REREAD)


async def _follow(client: tenure.AsyncClient, now: Map, show: Callable[[Map], str]) -> None:
    """Print the map again each time it changes, until cancelled (Ctrl-C): woken by the
    group's bell and its members' locks, and reading again every ``REREAD`` seconds."""
    group, rung, watched = now["group"], [anyio.Event()], dict[str, anyio.CancelScope]()
    failed: tenure.TenureError | None = None
    names = tenure.PartitionLocks(group)

    async def read() -> Map:
        return read_map(group, await client.locks(prefix=names.prefix))

    async with anyio.create_task_group() as tg:

        async def pause(now: Map) -> None:  # until a watched lock changes, or REREAD passed
            ids = {m["id"] for m in now["members"]}
            for member in [m for m in watched if m not in ids]:
                watched.pop(member).cancel()
            for member in ids - watched.keys():
                watched[member] = scope = anyio.CancelScope()
                tg.start_soon(_observe, client, names.member(member), rung, scope)
            with anyio.move_on_after(REREAD):
                await rung[0].wait()
            rung[0] = anyio.Event()

        tg.start_soon(_observe, client, names.bell, rung, anyio.CancelScope())
        try:
            async for new in changes(now, read, _settled, pause):
                click.echo(("" if show is json.dumps else "\n") + show(new))
        except tenure.TenureError as exc:  # raised below, not in an ExceptionGroup: one line
            failed = exc
            tg.cancel_scope.cancel()
    if failed is not None:
        raise failed


async def _show(group: str, store: str | None, watch: bool, show: Callable[[Map], str]) -> int:
    async with tenure.connect_async(store) as client:
        now = read_map(group, await client.locks(prefix=tenure.PartitionLocks(group).prefix))
        click.echo(show(now))
        if watch:
            with anyio.CancelScope() as scope, on_interrupt(scope.cancel):
                await _follow(client, now, show)  # until Ctrl-C cancels it
            return EXIT_SIGNAL_BASE + 2  # as tenure leader --watch ends on Ctrl-C
    return EXIT_OK if now["members"] else EXIT_NOT_HELD


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.argument("group")
@click.option("--watch", is_flag=True, help="Print the map again on each change, until Ctrl-C.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object (per map) per line.")
@store_option
def partitions(group: str, watch: bool, as_json: bool, store: str | None) -> int:
    """Show partition group GROUP: its members (id, weight, holder, time left) and the items
    owned now (item, member, token, time left). Exit 1 if the group has no members.

    \b
    --json prints one object per map:
      {"group", "members": [{"id", "weight", "host", "pid", "label", "expires_in"}],
       "items": [{"item", "member", "token", "expires_in"}]}
    """
    tenure.PartitionLocks(group)  # checked
    try:
        return anyio.run(_show, group, store, watch, json.dumps if as_json else _text)
    except KeyboardInterrupt:
        if not watch:
            raise
        return EXIT_SIGNAL_BASE + 2  # as tenure leader --watch ends on Ctrl-C


__all__ = ["partitions", "read_map"]
