"""A picture of a chaos run: who held a lease when, what the nemesis did, where it went wrong.

One self-contained HTML page with a hand-written inline SVG (no script, no external asset, no
plotting dependency), so a CI artefact opens anywhere and a reader sees at a glance whether a
paused holder kept writing after the next grant, and whether the resource refused it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from html import escape
from pathlib import Path

from .history import NEMESIS, Event, Finding, LeaseWindow, lease_windows
from .report import (
    Fault,
    RunInfo,
    faults_of,
    headline,
    is_refused_write,
    run_end,
    worker_names,
)

WIDTH = 1200
LEFT = 64  # room for the lane labels
RIGHT = 24
TOP = 62  # two title lines and the time axis
LANE = 28
BAR = 12  # height of a lease bar, centred in the upper part of its lane
BAR_Y = 5  # offset of the bar within its lane
LEGEND_ROW = 18

LEASE = "#3b7d5a"
WRITE_OK = "#333333"
REFUSED = "#f28e2b"
VIOLATION = "#d62728"
DIAGNOSTIC = "#7b4fa6"
# Fault colours keep clear of the marks' green, orange and red.
FAULT_COLOURS = {
    "pause": "#4e79a7",
    "long-pause": "#2f4b7c",
    "stall": "#6b6ecf",
    "kill": "#111111",
    "partition": "#b07aa1",
    "lost-reply": "#17becf",
    "store-kill": "#8c564b",
    "store-pause": "#9c9ede",
    "store-restart": "#7f7f7f",
    "member-kill": "#843c39",
    "majority-loss": "#637939",
    "clock": "#bcbd22",
}
SPARE_COLOURS = ("#e7969c", "#aec7e8", "#c49c94", "#8ca252", "#de9ed6", "#5254a3")


@dataclass(frozen=True)
class _Scale:
    """Host monotonic time to x pixels; t=0 is the start of the run."""

    t0: float
    span: float

    def x(self, t: float) -> float:
        rel = min(max(t - self.t0, 0.0), self.span)
        return LEFT + rel / self.span * (WIDTH - LEFT - RIGHT)


def render_timeline(
    info: RunInfo,
    history: Sequence[Event],
    findings: Sequence[Finding],
    bars: Sequence[LeaseWindow] | None = None,
) -> str:
    """The HTML page of one run (``history`` in time order). ``bars``: what to draw instead of
    the workers' lease windows (the ``run`` workload: when each command worked)."""
    end = run_end(info, history)
    scale = _Scale(info.started, max(end - info.started, 1e-3))
    workers = worker_names(info, history)
    lanes = {w: TOP + i * LANE for i, w in enumerate(workers)}
    faults = faults_of(history, end)
    colours = _fault_colours(faults)
    bottom = TOP + len(lanes) * LANE
    instant = {f.kind for f in faults} - {f.kind for f in faults if f.end is not None}
    legend, legend_height = _legend(colours, instant, bottom + 24)
    body = [
        *_title(info, findings),
        *_lanes(lanes),
        *_axis(scale, bottom),
        *_fault_marks(faults, lanes, scale, colours),
        *_lease_bars(lease_windows(history, end) if bars is None else bars, lanes, scale),
        *_write_marks(history, lanes, scale),
        *_finding_marks(findings, lanes, scale),
        *legend,
    ]
    height = bottom + 24 + legend_height + 8
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">\n'
        + "\n".join(body)
        + "\n</svg>"
    )
    return _page(info, svg)


def write_timeline(
    path: Path | str,
    info: RunInfo,
    history: Sequence[Event],
    findings: Sequence[Finding],
    bars: Sequence[LeaseWindow] | None = None,
) -> None:
    Path(path).write_text(render_timeline(info, history, findings, bars), encoding="utf-8")


# --- parts of the picture -----------------------------------------------------------------------


def _title(info: RunInfo, findings: Sequence[Finding]) -> list[str]:
    gated = sum(f.gated for f in findings)
    verdict = "PASS" if gated == 0 else f"FAIL: {gated} violation{'s' if gated != 1 else ''}"
    colour = LEASE if gated == 0 else VIOLATION
    return [
        f'<text x="{LEFT}" y="18" font-size="14" font-weight="bold" fill="{colour}" '
        f'class="verdict">{escape(verdict)}</text>',
        f'<text x="{LEFT}" y="34" class="headline">{escape(headline(info))}</text>',
    ]


def _axis(scale: _Scale, bottom: float) -> Iterator[str]:
    """Ticks in seconds along the top, with faint grid lines down through the lanes."""
    step = _tick_step(scale.span)
    for i in range(int(scale.span / step + 1e-9) + 1):
        x = scale.x(scale.t0 + i * step)
        yield (
            f'<line x1="{x:.1f}" y1="{TOP - 6}" x2="{x:.1f}" y2="{bottom}" stroke="#dddddd" '
            f'class="tick"/><text x="{x:.1f}" y="{TOP - 9}" text-anchor="middle" fill="#555555">'
            f"{i * step:g} s</text>"
        )


def _tick_step(span: float) -> float:
    """1, 2 or 5 × 10^k, so that about ten ticks fit."""
    raw = span / 10
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def _lanes(lanes: Mapping[str, float]) -> Iterator[str]:
    for i, (worker, y) in enumerate(lanes.items()):
        fill = "#f6f6f6" if i % 2 == 0 else "#ffffff"
        yield (
            f'<rect x="{LEFT}" y="{y}" width="{WIDTH - LEFT - RIGHT}" height="{LANE}" '
            f'fill="{fill}"/><text x="{LEFT - 8}" y="{y + LANE / 2 + 4}" text-anchor="end" '
            f'class="lane-label">{escape(worker)}</text>'
        )


def _fault_colours(faults: Iterable[Fault]) -> dict[str, str]:
    kinds = sorted({fault.kind for fault in faults})
    spare = iter(SPARE_COLOURS * (len(kinds) // len(SPARE_COLOURS) + 1))
    return {kind: FAULT_COLOURS.get(kind) or next(spare) for kind in kinds}


def _fault_marks(
    faults: Iterable[Fault], lanes: Mapping[str, float], scale: _Scale, colours: Mapping[str, str]
) -> Iterator[str]:
    """A fault on workers shades their lanes; one on the store (or anything else) shades all."""
    top, bottom = TOP, TOP + len(lanes) * LANE
    for fault in faults:
        spans = [(lanes[t], lanes[t] + LANE) for t in fault.targets if t in lanes]
        for y1, y2 in spans or [(top, bottom)]:
            yield _fault_mark(fault, y1, y2, scale, colours[fault.kind], bool(spans))


def _fault_mark(fault: Fault, y1: float, y2: float, scale: _Scale, colour: str, lane: bool) -> str:
    x1 = scale.x(fault.start)
    where = ", ".join(fault.targets) or "store"
    cls = "fault" if lane else "fault store-fault"
    if fault.end is None:
        tip = f"{fault.kind} {where} at {fault.start - scale.t0:.3f} s"
        return (
            f'<line x1="{x1:.1f}" y1="{y1}" x2="{x1:.1f}" y2="{y2}" stroke="{colour}" '
            f'stroke-width="2" class="{cls}"><title>{escape(tip)}</title></line>'
        )
    x2 = max(scale.x(fault.end), x1 + 1)
    tip = (
        f"{fault.kind} {where} {fault.start - scale.t0:.3f}–{fault.end - scale.t0:.3f} s"
        f" ({fault.end - fault.start:.3f} s)"
    )
    opacity = 0.3 if lane else 0.18
    return (
        f'<rect x="{x1:.1f}" y="{y1}" width="{x2 - x1:.1f}" height="{y2 - y1}" fill="{colour}" '
        f'fill-opacity="{opacity}" class="{cls}"><title>{escape(tip)}</title></rect>'
    )


def _lease_bars(
    windows: Iterable[LeaseWindow], lanes: Mapping[str, float], scale: _Scale
) -> Iterator[str]:
    for w in windows:
        x1 = scale.x(w.start)
        width = max(scale.x(w.end) - x1, 1.5)
        y = lanes[w.process] + BAR_Y
        token = "?" if w.token is None else str(w.token)
        tip = (
            f"{w.process} token {token}: {w.start - scale.t0:.3f}–{w.end - scale.t0:.3f} s "
            f"(ended by {w.ended_by})"
        )
        label = ""
        if width >= 7 * len(token) + 6:
            label = (
                f'<text x="{x1 + 3:.1f}" y="{y + BAR - 2.5}" font-size="10" fill="#ffffff" '
                f'pointer-events="none">{escape(token)}</text>'
            )
        yield (
            f'<rect x="{x1:.1f}" y="{y}" width="{width:.1f}" height="{BAR}" rx="2" fill="{LEASE}" '
            f'class="lease"><title>{escape(tip)}</title></rect>{label}'
        )


def _write_marks(
    history: Iterable[Event], lanes: Mapping[str, float], scale: _Scale
) -> Iterator[str]:
    """Accepted writes as thin ticks under the bar; refused ones as an orange block on it."""
    for event, invoke in _completed_writes(history):
        if event.process not in lanes or event.type not in ("ok", "fail"):
            continue
        if event.type == "fail" and not is_refused_write(event):
            continue
        x, y = scale.x(event.t), lanes[event.process]
        token = event.token if event.token is not None or invoke is None else invoke.token
        value = invoke.value if invoke is not None else None
        verb = "accepted" if event.type == "ok" else "refused (stale token)"
        tip = f"{event.process} write token {token} {verb} at {event.t - scale.t0:.3f} s: {value}"
        if event.type == "ok":
            yield (
                f'<line x1="{x:.1f}" y1="{y + BAR_Y + BAR + 1}" x2="{x:.1f}" y2="{y + LANE - 2}" '
                f'stroke="{WRITE_OK}" class="write-ok"><title>{escape(tip)}</title></line>'
            )
        else:
            yield (
                f'<rect x="{x - 2:.1f}" y="{y + 2}" width="4" height="{LANE - 4}" '
                f'fill="{REFUSED}" class="write-refused"><title>{escape(tip)}</title></rect>'
            )


def _completed_writes(history: Iterable[Event]) -> Iterator[tuple[Event, Event | None]]:
    """Each write's completion with its invoke (which carries the token and value)."""
    invokes: dict[str, Event] = {}
    for e in history:
        if e.f != "write" or e.process == NEMESIS:
            continue
        if e.type == "invoke":
            invokes[e.process] = e
        else:
            yield e, invokes.pop(e.process, None)


def _finding_marks(
    findings: Iterable[Finding], lanes: Mapping[str, float], scale: _Scale
) -> Iterator[str]:
    """Violations as red dots on the lanes they name; diagnostics as hollow purple rings."""
    for finding in findings:
        if finding.t is None:
            continue
        x = scale.x(finding.t)
        tip = f"{finding.check} at {finding.t - scale.t0:.3f} s: {finding.message}"
        for process in finding.processes:
            if process not in lanes:
                continue
            cy = lanes[process] + BAR_Y + BAR / 2
            if finding.gated:
                style = f'fill="{VIOLATION}" stroke="#ffffff" class="violation"'
            else:
                style = f'fill="none" stroke="{DIAGNOSTIC}" stroke-width="1.5" class="diagnostic"'
            yield (
                f'<circle cx="{x:.1f}" cy="{cy}" r="5" {style}><title>{escape(tip)}</title>'
                "</circle>"
            )


def _legend(
    colours: Mapping[str, str], instant: AbstractSet[str], y: float
) -> tuple[list[str], float]:
    """Legend entries left to right, wrapping at the picture's width; returns its height."""
    swatches = [
        (f'<rect width="16" height="{BAR}" y="-9" rx="2" fill="{LEASE}"/>', "lease held"),
        (f'<line x1="8" x2="8" y1="-9" y2="3" stroke="{WRITE_OK}"/>', "write accepted"),
        (f'<rect x="6" width="4" height="14" y="-10" fill="{REFUSED}"/>', "write refused (stale)"),
        (f'<circle cx="8" cy="-3" r="5" fill="{VIOLATION}"/>', "violation"),
        (
            f'<circle cx="8" cy="-3" r="5" fill="none" stroke="{DIAGNOSTIC}" stroke-width="1.5"/>',
            "diagnostic",
        ),
        *((_fault_swatch(c, kind in instant), kind) for kind, c in colours.items()),
    ]
    parts: list[str] = []
    x, row = float(LEFT), 0
    for swatch, label in swatches:
        advance = 24 + 6.5 * len(label) + 16
        if x + advance > WIDTH - RIGHT and x > LEFT:
            x, row = float(LEFT), row + 1
        parts.append(
            f'<g transform="translate({x:.1f},{y + row * LEGEND_ROW})" class="legend">{swatch}'
            f'<text x="22" y="1">{escape(label)}</text></g>'
        )
        x += advance
    return parts, (row + 1) * LEGEND_ROW


def _fault_swatch(colour: str, instant: bool) -> str:
    if instant:
        return f'<line x1="8" x2="8" y1="-10" y2="4" stroke="{colour}" stroke-width="2"/>'
    return f'<rect width="16" height="14" y="-10" fill="{colour}" fill-opacity="0.3"/>'


def _page(info: RunInfo, svg: str) -> str:
    title = escape(f"tenure chaos — {info.scenario} (seed {info.seed})")
    notes = "".join(f"<li>{escape(note)}</li>" for note in info.notes)
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{title}</title>"
        "<style>body{font-family:sans-serif;margin:16px}ul{font-size:13px}</style>"
        f"</head><body>\n{svg}\n" + (f"<ul>{notes}</ul>" if notes else "") + "\n</body></html>\n"
    )
