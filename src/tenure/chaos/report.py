"""The summary of a chaos run: what the nemesis injected, what the workers did, what was found.

A person reads `Report.to_text` at a glance after a run; `Report.to_json` keeps the same facts for
scripts and CI. Lease windows and faults are derived here once and shared with the timeline
picture (`tenure.chaos.timeline`), so the summary and the picture tell one story.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .history import (
    NEMESIS,
    Event,
    Finding,
    LeaseWindow,
    WorkRecord,
    lease_windows,
    targets_of,
)

OPERATIONS = ("acquire", "read", "write", "release")
OUTCOMES = ("ok", "fail", "info")
MAX_TEXT_FINDINGS = 10
ONE_OFFS = frozenset({"lost", "start", "own", "disown", "stop"})
"""Workers' events that are no operation (no invoke and completion)."""


@dataclass
class RunInfo:
    """How a run was set up. ``started`` (host monotonic time) is t=0 of every relative time."""

    scenario: str
    store: str  # URL, already redacted
    workload: str
    fenced: bool
    workers: int
    ttl: float
    seed: int
    seconds: float  # planned duration
    started: float
    ended: float
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Fault:
    """One fault of the nemesis; ``end`` is None for an instant fault (a kill)."""

    kind: str
    targets: tuple[str, ...]
    start: float
    end: float | None
    value: Any = None


@dataclass
class Report:
    """Counts of one run. ``violations`` (gated findings per check, from the caller) decides the
    verdict together with the findings themselves, so neither can hide a failure."""

    info: RunInfo
    operations: dict[str, dict[str, int]]
    faults: dict[str, int]
    grants: int
    acknowledged: int
    refused: int
    losses: int
    next_grant: list[float]  # seconds from a fault on the holder to another worker's grant
    violations: dict[str, int]
    diagnostics: dict[str, int]
    findings: list[Finding]
    commands: dict[str, int] = field(default_factory=dict)
    """The ``run`` workload: commands started, those that worked, and their exit codes."""

    @property
    def violation_count(self) -> int:
        return max(sum(self.violations.values()), sum(f.gated for f in self.findings))

    @property
    def passed(self) -> bool:
        """No violation, whether counted by the caller or found among the findings."""
        return self.violation_count == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "violations": dict(self.violations),
            "diagnostics": dict(self.diagnostics),
            "info": {**asdict(self.info), "duration": round(self.duration, 3)},
            "counts": {
                "operations": self.operations,
                "faults": dict(self.faults),
                "grants": self.grants,
                "acknowledged_writes": self.acknowledged,
                "refused_writes": self.refused,
                "losses_noticed": self.losses,
                "commands": dict(self.commands),
            },
            "time_to_next_grant": _gap_summary(self.next_grant),
            "findings": [_finding_json(f, self.info.started) for f in self.findings],
        }

    @property
    def duration(self) -> float:
        return self.info.ended - self.info.started

    def to_text(self) -> str:
        info = self.info
        lines = [
            f"{self.verdict} — {headline(info)}",
            f"run:         {info.workers} workers, ttl {info.ttl:g} s, "
            f"{info.seconds:g} s planned, {self.duration:.2f} s ran",
            f"faults:      {_counts_text(self.faults)}",
            f"operations:  {_operations_text(self.operations)}",
            f"grants:      {self.grants}",
            *(
                _work_text(self.commands)
                or [
                    f"writes:      {self.acknowledged} acknowledged, {self.refused} refused"
                    " (stale token)"
                ]
            ),
            f"losses:      {self.losses} noticed",
            f"next grant:  {_gap_text(self.next_grant)}",
            f"violations:  {_counts_text(self.violations, nonzero_first=True)}",
            f"diagnostics: {_counts_text(self.diagnostics)}",
            *_findings_text(self.findings, info.started),
            *(f"note: {note}" for note in info.notes),
        ]
        return "\n".join(lines)

    @property
    def verdict(self) -> str:
        n = self.violation_count
        return "PASS" if n == 0 else f"FAIL: {n} violation{'s' if n != 1 else ''}"


def build_report(
    info: RunInfo,
    history: Sequence[Event],
    findings: Sequence[Finding],
    violations: Mapping[str, int],
    work: Sequence[WorkRecord] = (),
) -> Report:
    """Count what happened in ``history`` (in time order); ``violations`` comes from the caller.
    ``work``: the ``run`` workload's work records; each child that worked ran under one grant."""
    end = run_end(info, history)
    workers = set(worker_names(info, history))
    faults = faults_of(history, end)
    operations = _operation_counts(history)
    commands = _command_counts(history, work) if info.workload == "run" else {}
    return Report(
        info=info,
        operations=operations,
        faults=dict(Counter(fault.kind for fault in faults)),
        grants=commands.get("worked", operations["acquire"]["ok"] + _owned(history)),
        acknowledged=operations["write"]["ok"],
        refused=sum(is_refused_write(e) for e in history),
        losses=sum(_is_loss(e) for e in history),
        next_grant=_next_grant_gaps(history, faults, lease_windows(history, end), workers),
        violations=dict(violations),
        diagnostics=dict(Counter(f.check for f in findings if not f.gated)),
        findings=list(findings),
        commands=commands,
    )


# --- shared with the timeline -------------------------------------------------------------------


def headline(info: RunInfo) -> str:
    fenced = "fenced" if info.fenced else "unfenced"
    return (
        f"scenario {info.scenario}, store {info.store}, workload {info.workload}, {fenced}, "
        f"seed {info.seed}"
    )


def natural_key(name: str) -> tuple[tuple[str, int], ...]:
    """Sort key that puts w2 before w10."""
    return tuple((text, int(digits) if digits else -1) for text, digits in _CHUNKS.findall(name))


_CHUNKS = re.compile(r"(\D*)(\d*)")


def worker_names(info: RunInfo, history: Iterable[Event]) -> list[str]:
    """Every worker of the run, also one that never got to record an event."""
    names = {e.process for e in history if e.process != NEMESIS}
    names.update(f"w{i}" for i in range(info.workers))
    return sorted(names, key=natural_key)


def run_end(info: RunInfo, history: Sequence[Event]) -> float:
    """The end of the run, or the last event if a straggler recorded after it."""
    return max([info.ended, *(e.t for e in history[-1:])])


def faults_of(history: Iterable[Event], end: float) -> list[Fault]:
    """Each fault once: an invoke paired with its completion, or a lone event (instant fault).
    A fault never healed lasts until ``end``."""
    faults: list[Fault] = []
    open_: dict[tuple[str, tuple[str, ...]], int] = {}
    for e in history:
        if e.process != NEMESIS:
            continue
        key = (e.f, targets_of(e))
        if e.type == "invoke":
            open_[key] = len(faults)
            faults.append(Fault(e.f, key[1], e.t, end, e.value))
        elif (i := _pop_open(open_, key)) is not None:
            faults[i] = replace(faults[i], end=e.t)
        else:
            faults.append(Fault(e.f, key[1], e.t, None, e.value))
    return faults


def _pop_open(
    open_: dict[tuple[str, tuple[str, ...]], int], key: tuple[str, tuple[str, ...]]
) -> int | None:
    """The open fault a completion closes; a completion that names no target closes the latest
    open fault of its kind."""
    if key in open_:
        return open_.pop(key)
    if key[1]:
        return None
    same_kind = [k for k in open_ if k[0] == key[0]]
    return open_.pop(same_kind[-1]) if same_kind else None


def is_refused_write(event: Event) -> bool:
    """The resource refused the write's token (not a write skipped because the lease was lost)."""
    return event.f == "write" and event.type == "fail" and event.error == "stale"


# --- counting -----------------------------------------------------------------------------------


def _operation_counts(history: Iterable[Event]) -> dict[str, dict[str, int]]:
    """Outcomes per operation; an invoke that never completed (its worker died) counts as info,
    as its effect is unknown."""
    counts: dict[str, Counter[str]] = {f: Counter() for f in OPERATIONS}
    invoked: Counter[str] = Counter()
    for e in history:
        if e.process == NEMESIS or e.f in ONE_OFFS:
            continue
        if e.type == "invoke":
            invoked[e.f] += 1
        else:
            counts.setdefault(e.f, Counter())[e.type] += 1
    for f, n in invoked.items():
        counts.setdefault(f, Counter())["info"] += max(0, n - counts[f].total())
    return {f: {o: c[o] for o in OUTCOMES} for f, c in counts.items()}


def _is_loss(event: Event) -> bool:
    """A worker noticed a lease lost (``partition``: an item's, told by a ``lost`` change)."""
    if event.process == NEMESIS:
        return False
    why = event.value.get("why") if isinstance(event.value, dict) else None
    return event.f == "lost" or (event.f == "disown" and why == "lost")


def _owned(history: Iterable[Event]) -> int:
    """The ``partition`` workload's grants: each item a member was told it owns."""
    return sum(e.f == "own" and e.process != NEMESIS for e in history)


def _command_counts(history: Iterable[Event], work: Iterable[WorkRecord]) -> dict[str, int]:
    """How many commands ``tenure run`` started, how many worked, and how they ended."""
    counts: Counter[str] = Counter()
    for e in history:
        if e.f == "run" and e.process != NEMESIS:
            counts["started" if e.type == "invoke" else (e.error or "exit 0")] += 1
    return {"started": 0, **counts, "worked": len({r.child for r in work})}


def _next_grant_gaps(
    history: Iterable[Event], faults: Iterable[Fault], windows: list[LeaseWindow], workers: set[str]
) -> list[float]:
    """For each fault on a worker that held a lease when it began: how long until another worker
    was granted one (faults after which no grant came are skipped)."""
    grants = [
        (e.t, e.process)
        for e in history
        if e.f == "acquire" and e.type == "ok" and e.process != NEMESIS
    ]
    gaps: list[float] = []
    for fault in faults:
        for target in fault.targets:
            if target not in workers or not _holds(windows, target, fault.start):
                continue
            nxt = next((t for t, p in grants if t >= fault.start and p != target), None)
            if nxt is not None:
                gaps.append(nxt - fault.start)
    return gaps


def _holds(windows: Iterable[LeaseWindow], process: str, t: float) -> bool:
    # Inclusive end: a kill ends its target's window at the kill's own instant.
    return any(w.process == process and w.start <= t <= w.end for w in windows)


# --- formatting ---------------------------------------------------------------------------------


def _gap_summary(gaps: Sequence[float]) -> dict[str, Any]:
    if not gaps:
        return {"count": 0, "median": None, "max": None}
    return {
        "count": len(gaps),
        "median": round(statistics.median(gaps), 3),
        "max": round(max(gaps), 3),
    }


def _gap_text(gaps: Sequence[float]) -> str:
    if not gaps:
        return "— (no fault on a holder was followed by another grant)"
    n = len(gaps)
    return (
        f"median {statistics.median(gaps):.2f} s, max {max(gaps):.2f} s "
        f"(after {n} fault{'s' if n != 1 else ''} on the holder)"
    )


def _work_text(commands: Mapping[str, int]) -> list[str]:
    if not commands:
        return []
    ends = ", ".join(f"{k} {n}" for k, n in sorted(commands.items()) if k.startswith("exit"))
    return [
        f"commands:    {commands['started']} started under tenure run, {commands['worked']} "
        f"worked; ended: {ends or 'none yet'}"
    ]


def _counts_text(counts: Mapping[str, int], nonzero_first: bool = False) -> str:
    items = list(counts.items())
    if nonzero_first:
        items.sort(key=lambda kv: kv[1] == 0)  # stable: keeps the caller's order otherwise
    if not any(n for _, n in items):
        return "none"
    return ", ".join(f"{name} {n}" for name, n in items)


def _operations_text(operations: Mapping[str, Mapping[str, int]]) -> str:
    return (
        "; ".join(
            f"{f} {c['ok']} ok/{c['fail']} fail/{c['info']} info"
            for f, c in operations.items()
            if any(c.values())
        )
        or "none"
    )


def _findings_text(findings: Sequence[Finding], started: float) -> list[str]:
    if not findings:
        return []
    shown = sorted(findings, key=lambda f: (not f.gated, f.t is None, f.t or 0.0))
    lines = ["findings:"]
    lines += [f"  {_finding_line(f, started)}" for f in shown[:MAX_TEXT_FINDINGS]]
    if len(shown) > MAX_TEXT_FINDINGS:
        lines.append(f"  … and {len(shown) - MAX_TEXT_FINDINGS} more")
    return lines


def _finding_line(finding: Finding, started: float) -> str:
    mark = "✗" if finding.gated else "·"
    when = f" t={finding.t - started:.3f}s" if finding.t is not None else ""
    who = f" [{', '.join(finding.processes)}]" if finding.processes else ""
    return f"{mark} {finding.check}{when}{who}: {finding.message}"


def _finding_json(finding: Finding, started: float) -> dict[str, Any]:
    return {
        "check": finding.check,
        "message": finding.message,
        "gated": finding.gated,
        "t": round(finding.t - started, 3) if finding.t is not None else None,
        "processes": list(finding.processes),
    }
