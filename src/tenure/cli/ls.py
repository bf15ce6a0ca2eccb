"""``tenure ls [NAME]``: who holds which lock now, as a table, in detail, or as JSON; and which
free names are held back by lock-delay, until when."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import anyio
import click

import tenure
from tenure import LockDelay, LockInfo, describe
from tenure.checks import check_name

from . import EXIT_NOT_HELD, EXIT_OK, columns, store_option
from .watching import REREAD, changes, frame, on_interrupt

COLUMNS = ("NAME", "TOKEN", "HOLDER", "EXPIRES", "WAITERS")


def shown(text: str) -> str:
    """Names and labels come from other processes: never print control characters raw."""
    return text if text.isprintable() else repr(text)


def holder(info: LockInfo) -> str:
    owner = info.holder
    label = f" ({shown(owner.label)})" if owner.label else ""
    return f"{shown(owner.host)} pid {owner.pid}{label}"


def table(infos: list[LockInfo], held: Sequence[LockDelay] = ()) -> str:
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
    rows += [(shown(h.name), str(h.token or "-"), held_back_why(h), free(h), "-") for h in held]
    return columns(rows)


def recipes(infos: list[LockInfo], kind: str, gate: str) -> dict[str, Group]:
    """The locks of one recipe (semaphores, read-write locks) grouped by the recipe's name:
    the slots held, and the gate's holder (the recipe says which lock is which:
    `tenure.describe`)."""
    groups: dict[str, Group] = {}
    for info in infos:
        lock = describe(info.name)
        if lock is None or lock.kind != kind:
            continue
        name, part = lock.of, lock.part
        if part == gate:
            groups.setdefault(name, Group()).gate = info
        elif part.isdigit():
            group = groups.setdefault(name, Group())
            group.slots.append(int(part))
            group.holders.append(info)
            if info.value is not None and info.value.isdigit():
                group.counts.append(int(info.value))
    return dict(sorted(groups.items()))


@dataclass
class Group:
    slots: list[int] = field(default_factory=list)
    holders: list[LockInfo] = field(default_factory=list)
    """The slots' locks, as ``slots`` lists them (``tenure serve`` shows who holds each)."""
    counts: list[int] = field(default_factory=list)
    """The counts the holders asked with (a semaphore's permits)."""
    gate: LockInfo | None = None

    @property
    def waiting(self) -> int:
        """The gate's holder waits at the head of the line, its waiters behind it."""
        return 0 if self.gate is None else 1 + self.gate.waiters


def semaphores(infos: list[LockInfo]) -> list[str]:
    """A line per semaphore in use: its held slots, and how many wait."""
    lines = []
    for name, group in recipes(infos, "semaphore", "queue").items():
        held, slots = len(group.slots), ", ".join(map(str, sorted(group.slots))) or "-"
        # The holders' count (the largest, if they asked with several); none while only waiting.
        count = max(group.counts, default=None)
        of = f"{held} of {count} permits held" if count else f"{held} permit(s) held"
        free = f", {max(0, count - held)} free" if count else ""
        lines.append(
            f"semaphore {shown(name)!r}: {of} (slots {slots}){free}, {group.waiting} waiting"
        )
    return lines


def rwlocks(infos: list[LockInfo]) -> list[str]:
    """A line per read-write lock in use: its readers, and who holds its gate (a writer holds
    it while writing; a reader only while it takes its slot, or waits for one)."""
    lines = []
    for name, group in recipes(infos, "rwlock", "gate").items():
        gate = group.gate
        who = (
            "no writer"
            if gate is None
            else f"gate held by {holder(gate)} (writing, or next in line), {gate.waiters} waiting"
        )
        lines.append(f"read-write lock {shown(name)!r}: {len(group.slots)} reader(s), {who}")
    return lines


def free(held: LockDelay) -> str:
    return f"free in {max(0.0, held.free_in):.1f}s"


def held_back_why(held: LockDelay) -> str:
    return "held back (revoked)" if held.revoked else "held back (lock-delay)"


def held_back_line(held: LockDelay) -> str:
    token = f" with token {held.token}" if held.token else ""
    if held.revoked is not None:
        return (
            f"lock {shown(held.name)!r} is not held: held back: {shown(held.revoked.describe())},"
            f" until the old lease could no longer be acting (its TTL and lock-delay);"
            f" {free(held)}"
        )
    return (
        f"lock {shown(held.name)!r} is not held: its lease{token} ended without a release, so "
        f"lock-delay holds it back; {free(held)}"
    )


def detail(info: LockInfo) -> str:
    owner = info.holder
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
    data["state"] = "held"
    return data


def _held_json(held: LockDelay) -> dict[str, object]:
    data = {"name": held.name, "token": held.token, "state": "held-back", "free_in": held.free_in}
    if held.revoked is not None:
        data["revoked"] = asdict(held.revoked)
    return data


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("name", required=False)
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, for scripts.")
@click.option(
    "--watch",
    is_flag=True,
    help="A live table: shown again each time a holder, token or waiter changes (read every"
    f" {REREAD:g}s), until Ctrl-C (exit 0). With --json, one list per line.",
)
def ls(name: str | None, store: str | None, as_json: bool, watch: bool) -> int:
    """Show who holds each lock: token, holder (host, pid, label), time left, waiters; and the
    free names that lock-delay holds back (their last lease ended without a release).

    With NAME, show that one lock in detail; a semaphore or read-write lock NAME in use shows
    its held locks (permits, readers, gate) and a summary. Exit 1 if nothing of NAME is held.

    \b
    --json prints a list of objects (empty if nothing is held or held back):
      {"name", "token", "state": "held", "holder": {"host", "pid", "label"},
       "expires_in", "waiters"}
      {"name", "token", "state": "held-back", "free_in"[, "revoked": {"by", "user",
       "at", "reason", ...}]}
    """
    if name is not None:
        check_name(name)
    if watch:
        if name is not None:
            raise click.UsageError("--watch shows every lock: give no NAME")
        return _watch(store, as_json)
    client = tenure.connect(store)
    try:
        infos = client.locks(name)
        held = client.lock_delays(name)
        parts = recipe_locks(client.locks(), name) if name is not None and not infos else []
    finally:
        client.close()
    if as_json:
        data = [_as_json(info) for info in infos + parts] + [_held_json(h) for h in held]
        click.echo(json.dumps(data, indent=2))
    elif name is not None:
        if infos:
            click.echo(detail(infos[0]))
        elif parts:  # NAME is a semaphore or read-write lock in use: its locks, and a summary
            click.echo(table(parts))
            for line in semaphores(parts) + rwlocks(parts):
                click.echo(line)
        else:
            click.echo(held_back_line(held[0]) if held else f"lock {name!r} is not held")
    else:
        click.echo(table(infos, held) if infos or held else "no locks held")
        for line in semaphores(infos) + rwlocks(infos):
            click.echo(line)
    return EXIT_NOT_HELD if name is not None and not infos and not parts else EXIT_OK


Frame = tuple[list[LockInfo], list[LockDelay]]


def _settled(now: Frame) -> object:
    """What a frame shows but the seconds left: what a change of it changes."""
    infos, held = now
    return [(i.name, i.token, i.holder, i.waiters) for i in infos], [
        (h.name, h.token) for h in held
    ]


def _frame(now: Frame, as_json: bool) -> str:
    infos, held = now
    if as_json:
        return json.dumps([_as_json(info) for info in infos] + [_held_json(h) for h in held])
    lines = [table(infos, held) if infos or held else "no locks held"]
    return "\n".join(lines + semaphores(infos) + rwlocks(infos))


def _watch(store: str | None, as_json: bool) -> int:
    """``tenure ls --watch``: the table again each time it changes, until Ctrl-C."""

    def show(now: Frame) -> None:
        (click.echo if as_json else frame)(_frame(now, as_json))

    async def follow() -> None:
        async with tenure.connect_async(store) as client:

            async def read() -> Frame:
                return await client.locks(), await client.lock_delays()

            async def pause(_now: Frame) -> None:
                await anyio.sleep(REREAD)  # no watch covers every name: a short poll

            now = await read()
            show(now)
            with anyio.CancelScope() as scope, on_interrupt(scope.cancel):
                async for new in changes(now, read, _settled, pause):
                    show(new)

    with contextlib.suppress(KeyboardInterrupt):  # before the loop's own handler was in place
        anyio.run(follow)
    return EXIT_OK


def recipe_locks(infos: list[LockInfo], name: str) -> list[LockInfo]:
    """The held locks of the semaphore or read-write lock called ``name`` (its permits' slots
    and queue, its readers' slots and gate), as the recipe names them (`tenure.describe`)."""
    found = []
    for info in infos:
        lock = describe(info.name)
        if lock is not None and lock.kind in ("semaphore", "rwlock") and lock.of == name:
            found.append(info)
    return found


__all__ = ["Group", "detail", "ls", "recipes", "table"]
