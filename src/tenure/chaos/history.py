"""The record of a chaos run: what every worker and the nemesis did, and when.

All times are ``time.monotonic()`` seconds read on the one host that runs the workers and the
nemesis (CLOCK_MONOTONIC is shared by all processes of a host, so the events of different
processes can be ordered). A worker whose *lease* clock is skewed on purpose still stamps its
history with the host's clock.

Each operation is an ``invoke`` event followed by its completion: ``ok`` (it happened), ``fail``
(it certainly did not happen: refused, not acquired) or ``info`` (unknown: the process died or
the answer was lost). One-off events (a lease loss noticed, a worker start) are ``info`` alone.

Operations (``f``) of the workers:

=========  =========================================================================================
acquire    invoke: asks for ``value["name"]``; ok: ``token`` granted, ``value["deadline"]`` the
           holder's own deadline converted to host time; fail: ``error`` says why. ``rwlock``:
           both carry ``value["mode"]`` (``read`` or ``write``), and the ok's ``name`` is the
           grant's own lock (a reader's slot, a writer's gate).
read       invoke with ``token`` (partition: ``value`` ``{"item": i, "deadline": d}``; rwlock:
           ``{"mode": m, "deadline": d}``); ok: ``value`` read; fail: refused
           (``error="stale"``) or lost.
write      invoke with ``token`` and ``value`` (counter: ``{"old": n, "new": n+1}``; set:
           ``{"element": e}``; election log: ``{"term": t, "leader": id, "n": seq}``;
           partition: ``{"item": i, "old": n, "new": n+1, "deadline": d}``, ``d`` the item's lease
           deadline in host time when the write began);
           ok: accepted by the resource; fail: refused (``error="stale"``) or not attempted
           because the lease was lost (``error="lost"``); info: unknown.
release    invoke with ``token``; ok / fail.
lost       info with ``token``: the worker noticed its lease was lost (callback time).
start      info: the worker process started (``pid`` set).
own        the ``partition`` workload, info with ``token``: the member was told it is granted
           ``value["item"]`` (recorded before it starts writing to it); ``value["deadline"]`` is
           the item's lease deadline converted to host time.
disown     info with ``token``: the member stopped writing to ``value["item"]`` (no write of it
           is under way any more), ``value["why"]`` ``leaving`` (released when it asks for the
           next change, after this record), ``lost`` or ``end`` (of the run).
stop       info: the member stops at the run's end (it leaves the group next).
run        the ``run`` workload: invoke when a worker starts ``tenure run`` (``pid`` set,
           ``value["child"]`` names the child's work file); ok when it exits 0, fail otherwise
           (``error`` gives the exit status).
=========  =========================================================================================

The ``run`` workload's children record their work apart, one file per child (`WorkRecord`,
`read_work`): what the ``work-overlap`` checker reads.

Faults are events of the process ``"nemesis"``: ``f`` is the fault's kind (``pause``, ``kill``,
``partition``, ``lost-reply``, ``store-kill``, ``store-pause``, ``store-restart``, ``clock``…),
``invoke`` when it begins and ``ok`` when it ends (``info`` for instant faults such as a kill),
with ``value["target"]`` naming the worker (``"w3"``) or the store member (``"etcd-1"``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

Phase = Literal["invoke", "ok", "fail", "info"]
NEMESIS = "nemesis"


@dataclass(frozen=True)
class Event:
    t: float
    process: str
    f: str
    type: Phase
    token: int | None = None
    value: Any = None
    error: str | None = None
    pid: int | None = None

    def to_json(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None})

    @classmethod
    def from_json(cls, line: str) -> Event:
        return cls(**json.loads(line))


@dataclass(frozen=True)
class Accepted:
    """One write the protected resource accepted, in the resource's own commit order."""

    seq: int
    process: str
    token: int
    data: dict[str, Any]
    t: float | None = None
    """When the resource committed it (host monotonic), if the resource keeps the time."""


@dataclass
class ResourceLog:
    """What the protected resource holds at the end of a run.

    ``workload`` names the shape of ``final``: ``counter`` (an int), ``set`` (a sorted list of
    elements), ``election`` (None: the log itself is the state) or ``partition`` (item → its
    counter). ``settings``: what the run wrote into the resource for the checkers (``partition``:
    ``items``, ``ttl``, ``lock_delay``).
    """

    workload: str
    accepted: list[Accepted]
    final: Any
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Finding:
    """One problem a checker found. ``gated`` findings are violations (exit status 1); the
    others are diagnostics, reported but expected under faults (e.g. a paused holder's stale
    belief, which fencing makes harmless)."""

    check: str
    message: str
    gated: bool = True
    t: float | None = None
    processes: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class LeaseWindow:
    """The time a worker believed it held a lease, as far as its own history shows."""

    name: str
    process: str
    token: int | None
    start: float
    end: float
    ended_by: str  # release, lost, kill, restart, reacquire or end (of the run)


@dataclass(frozen=True)
class WorkRecord:
    """One line of a ``run``-workload child's work file: it was working at ``t``."""

    child: str  # the file's stem: ``w3-7``, the 8th command worker w3 ran
    token: int
    t: float


class Recorder:
    """Appends one process's events to its own JSON-lines file, one ``write`` per event, so a
    process killed at any instant leaves whole lines (at most its last line torn, which
    `read_history` skips)."""

    def __init__(self, path: Path | str, process: str) -> None:
        self.process = process
        self._lock = threading.Lock()  # a lease's loss callback records from the client's thread
        self._file: TextIO = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115

    def record(self, f: str, type: Phase, **fields: Any) -> Event:
        with self._lock:
            event = Event(t=time.monotonic(), process=self.process, f=f, type=type, **fields)
            self._file.write(event.to_json() + "\n")
        return event

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_history(paths: Iterable[Path | str]) -> list[Event]:
    """All events of the given files, in time order (a torn last line is skipped)."""
    events: list[Event] = []
    for path in paths:
        events.extend(_read(Path(path)))
    events.sort(key=lambda e: e.t)
    return events


def history_files(directory: Path | str) -> list[Path]:
    return sorted(Path(directory).glob("*.jsonl"))


def read_work(directory: Path | str) -> list[WorkRecord]:
    """Every child's work records (``*.work`` files of ``directory``), in time order; a torn
    last line (the child was killed mid-write) is skipped."""
    records: list[WorkRecord] = []
    for path in sorted(Path(directory).glob("*.work")):
        with open(path, encoding="utf-8") as file:
            for line in file:
                t, _, token = line.partition(" ")
                if line.endswith("\n") and token.strip().isdigit():
                    records.append(WorkRecord(path.stem, int(token), float(t)))
    records.sort(key=lambda r: r.t)
    return records


def _read(path: Path) -> Iterator[Event]:
    if not path.exists():
        return
    with open(path, encoding="utf-8") as file:
        for line in file:
            if not line.endswith("\n"):
                break  # torn by a kill mid-write
            try:
                yield Event.from_json(line)
            except (ValueError, TypeError):
                continue


def targets_of(event: Event) -> tuple[str, ...]:
    """The workers or store members a nemesis event names in ``value["target"]``."""
    target = event.value.get("target") if isinstance(event.value, dict) else None
    if isinstance(target, str):
        return (target,)
    if isinstance(target, (list, tuple)):
        return tuple(str(t) for t in target)
    return ()


def lease_windows(history: Sequence[Event], end: float | None = None) -> list[LeaseWindow]:
    """The time each worker believed it held a lease: from each acquire ok to the first of its
    release invoke, its loss noticed, a kill of the worker, its next start or grant, or ``end``
    (default: the last event)."""
    if end is None:
        end = max((e.t for e in history), default=0.0)
    windows: list[LeaseWindow] = []
    held: dict[str, tuple[int | None, float, str]] = {}
    asked: dict[str, str] = {}  # each process's lock, from its acquire invoke

    def close(process: str, t: float, why: str, token: int | None = None) -> None:
        if process in held and (token is None or held[process][0] in (None, token)):
            tok, start, name = held.pop(process)
            windows.append(LeaseWindow(name, process, tok, start, max(t, start), why))

    for e in history:
        if e.process == NEMESIS:
            if e.f == "kill" and e.type in ("invoke", "info"):
                for target in targets_of(e):
                    close(target, e.t, "kill")
        elif e.f == "acquire" and e.type == "invoke":
            asked[e.process] = _name(e) or asked.get(e.process, "")
        elif e.f == "acquire" and e.type == "ok":
            close(e.process, e.t, "reacquire")
            held[e.process] = (e.token, e.t, _name(e) or asked.get(e.process, ""))
        elif e.f == "release" and e.type == "invoke":
            close(e.process, e.t, "release", e.token)
        elif e.f == "lost":
            close(e.process, e.t, "lost", e.token)
        elif e.f == "start":
            close(e.process, e.t, "restart")
    for process in list(held):
        close(process, end, "end")
    return sorted(windows, key=lambda w: w.start)


def _name(event: Event) -> str:
    return str(event.value.get("name", "")) if isinstance(event.value, dict) else ""


def write_history(path: Path | str, events: Iterable[Event]) -> None:
    """Write events to one file (for fixtures and saved runs)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as file:
        for event in events:
            file.write(event.to_json() + "\n")
    os.replace(tmp, path)
