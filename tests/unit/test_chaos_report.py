"""The chaos report and timeline read a hand-built history the way a person would."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from tenure.chaos.history import NEMESIS, Event, Finding, Phase, lease_windows
from tenure.chaos.report import RunInfo, build_report, faults_of
from tenure.chaos.timeline import render_timeline, write_timeline

T0 = 100.0
SVG = "{http://www.w3.org/2000/svg}"
STORE = "sqlite:///tmp/a&b<c>.db"


def ev(t: float, process: str, f: str, type: Phase, **fields: Any) -> Event:
    return Event(t=T0 + t, process=process, f=f, type=type, **fields)


def rel(t: float) -> float:
    return round(t - T0, 3)


def nem(t: float, f: str, type: Phase, target: str) -> Event:
    return ev(t, NEMESIS, f, type, value={"target": target})


# w0 holds token 1 and is paused; w1 is granted token 2 1.2 s later; w0 wakes, its write with
# token 1 is refused, it notices the loss. w2 holds token 3 and is killed; w0 gets token 4 1.0 s
# later, and its last write never completes. A pause of w2 while it holds nothing and a store
# restart do not count towards the time to the next grant.
HISTORY = [
    ev(0.0, "w0", "start", "info", pid=10),
    ev(0.0, "w1", "start", "info", pid=11),
    ev(0.0, "w2", "start", "info", pid=12),
    ev(0.1, "w0", "acquire", "invoke", value={"name": "x"}),
    ev(0.2, "w0", "acquire", "ok", token=1),
    ev(0.5, "w0", "write", "invoke", token=1, value={"old": 0, "new": 1}),
    ev(0.6, "w0", "write", "ok", token=1),
    nem(1.0, "pause", "invoke", "w0"),
    ev(1.0, "w1", "acquire", "invoke", value={"name": "x"}),
    nem(1.2, "pause", "invoke", "w2"),
    nem(1.4, "pause", "ok", "w2"),
    ev(1.5, "w2", "acquire", "invoke", value={"name": "x"}),
    ev(2.2, "w1", "acquire", "ok", token=2),
    ev(2.5, "w1", "write", "invoke", token=2, value={"old": 1, "new": 2}),
    ev(2.6, "w1", "write", "ok", token=2),
    nem(3.0, "pause", "ok", "w0"),
    ev(3.05, "w0", "write", "invoke", token=1, value={"old": 1, "new": 2}),
    ev(3.08, "w0", "write", "fail", token=1, error="stale"),
    ev(3.1, "w0", "lost", "info", token=1),
    ev(4.0, "w1", "release", "invoke", token=2),
    ev(4.05, "w1", "release", "ok", token=2),
    ev(4.2, "w2", "acquire", "ok", token=3),
    nem(5.0, "kill", "info", "w2"),
    ev(5.2, "w0", "acquire", "invoke", value={"name": "x"}),
    ev(5.5, "w2", "start", "info", pid=13),
    ev(6.0, "w0", "acquire", "ok", token=4),
    ev(6.5, "w0", "write", "invoke", token=4, value={"old": 2, "new": 3}),
    nem(7.0, "store-restart", "invoke", "store"),
    nem(8.0, "store-restart", "ok", "store"),
]
FINDINGS = [
    Finding("lost-update", "w0 & w1 <both> wrote 2", t=T0 + 3.08, processes=("w0", "w1")),
    Finding("belief-overlap", "w0 and w1 both held x", gated=False, t=T0 + 2.2, processes=("w1",)),
]
VIOLATIONS = {"stale-token": 0, "lost-update": 1}


def run_info(**changes: Any) -> RunInfo:
    fields: dict[str, Any] = dict(
        scenario="pause-holder",
        store=STORE,
        workload="counter",
        fenced=True,
        workers=3,
        ttl=1.0,
        seed=7,
        seconds=10.0,
        started=T0,
        ended=T0 + 10.0,
    )
    return RunInfo(**{**fields, **changes})


def test_report_counts() -> None:
    report = build_report(run_info(), HISTORY, FINDINGS, VIOLATIONS)
    assert report.grants == 4
    assert report.acknowledged == 2
    assert report.refused == 1
    assert report.losses == 1
    assert report.faults == {"pause": 2, "kill": 1, "store-restart": 1}
    assert report.operations["write"] == {"ok": 2, "fail": 1, "info": 1}  # the last never ended
    assert report.operations["acquire"] == {"ok": 4, "fail": 0, "info": 0}
    assert report.operations["release"] == {"ok": 1, "fail": 0, "info": 0}
    assert report.diagnostics == {"belief-overlap": 1}
    # The pause of holder w0 → w1's grant, the kill of holder w2 → w0's grant.
    assert report.next_grant == pytest.approx([1.2, 1.0])


def test_time_to_next_grant_of_one_paused_holder() -> None:
    history = [e for e in HISTORY if e.t < T0 + 4.0]
    report = build_report(run_info(), history, [], {})
    assert report.next_grant == pytest.approx([1.2])
    summary = report.to_json()["time_to_next_grant"]
    assert summary == {"count": 1, "median": 1.2, "max": 1.2}


def test_lease_windows_end_where_the_worker_stopped_holding() -> None:
    windows = lease_windows(HISTORY, T0 + 10.0)
    ends = [(w.process, w.token, rel(w.end), w.ended_by) for w in windows]
    assert ends == [
        ("w0", 1, 3.1, "lost"),
        ("w1", 2, 4.0, "release"),
        ("w2", 3, 5.0, "kill"),
        ("w0", 4, 10.0, "end"),
    ]


def test_faults_pair_invoke_and_completion_once() -> None:
    faults = faults_of([*HISTORY, nem(9.0, "partition", "invoke", "w1")], T0 + 10.0)
    spans = [
        (f.kind, f.targets, rel(f.start), None if f.end is None else rel(f.end)) for f in faults
    ]
    assert spans == [
        ("pause", ("w0",), 1.0, 3.0),
        ("pause", ("w2",), 1.2, 1.4),
        ("kill", ("w2",), 5.0, None),  # instant
        ("store-restart", ("store",), 7.0, 8.0),
        ("partition", ("w1",), 9.0, 10.0),  # never healed: lasts to the end of the run
    ]


def test_passed_follows_the_violations() -> None:
    failed = build_report(run_info(), HISTORY, FINDINGS, VIOLATIONS)
    assert not failed.passed
    diagnostics_only = [f for f in FINDINGS if not f.gated]
    clean = build_report(run_info(), HISTORY, diagnostics_only, dict.fromkeys(VIOLATIONS, 0))
    assert clean.passed
    # The caller's count alone fails a run, even without the finding at hand.
    assert not build_report(run_info(), HISTORY, diagnostics_only, VIOLATIONS).passed


def test_to_json_is_serialisable_with_relative_times() -> None:
    data = build_report(run_info(), HISTORY, FINDINGS, VIOLATIONS).to_json()
    again = json.loads(json.dumps(data))
    assert again["violations"] == VIOLATIONS
    assert again["passed"] is False
    assert again["counts"]["refused_writes"] == 1
    assert again["counts"]["faults"]["pause"] == 2
    assert again["info"]["store"] == STORE
    assert again["findings"][0] == {
        "check": "lost-update",
        "message": "w0 & w1 <both> wrote 2",
        "gated": True,
        "t": 3.08,
        "processes": ["w0", "w1"],
    }


def test_to_text_reads_at_a_glance() -> None:
    text = build_report(run_info(), HISTORY, FINDINGS, VIOLATIONS).to_text()
    first, *rest = text.splitlines()
    assert first.startswith("FAIL: 1 violation —")
    for part in ("pause-holder", STORE, "counter", "fenced", "seed 7"):
        assert part in first
    body = "\n".join(rest)
    assert "pause 2, kill 1, store-restart 1" in body
    assert "lost-update 1, stale-token 0" in body  # non-zero first
    assert "median 1.10 s, max 1.20 s" in body
    assert "✗ lost-update t=3.080s [w0, w1]" in body

    many = [Finding("stale-token", f"#{i}") for i in range(13)]
    text = build_report(run_info(fenced=False), [], many, {"stale-token": 13}).to_text()
    assert text.startswith("FAIL: 13 violations")
    assert "unfenced" in text.splitlines()[0]
    assert "… and 3 more" in text

    text = build_report(run_info(), HISTORY, [], {"stale-token": 0}).to_text()
    assert text.startswith("PASS —")
    assert "violations:  none" in text


def svg_of(page: str) -> ET.Element:
    match = re.search(r"<svg.*</svg>", page, re.DOTALL)
    assert match is not None
    return ET.fromstring(match.group(0))


def marks(svg: ET.Element, cls: str) -> list[ET.Element]:
    return [e for e in svg.iter() if cls in e.get("class", "").split()]


def test_timeline_draws_lanes_leases_and_marks() -> None:
    page = render_timeline(run_info(), HISTORY, FINDINGS)
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org", "")
    svg = svg_of(page)
    assert [e.text for e in marks(svg, "lane-label")] == ["w0", "w1", "w2"]
    leases = marks(svg, "lease")
    assert len(leases) == 4 and all(e.tag == f"{SVG}rect" for e in leases)
    assert len(marks(svg, "write-ok")) == 2
    assert len(marks(svg, "write-refused")) == 1
    violations = marks(svg, "violation")
    assert len(violations) == 2  # one on each lane the finding names
    assert all(e.get("fill") == "#d62728" for e in violations)
    assert len(marks(svg, "diagnostic")) == 1
    assert len(marks(svg, "store-fault")) == 1  # the store restart, across all lanes
    assert len(marks(svg, "fault")) == 4
    tips = [t.text or "" for t in svg.iter(f"{SVG}title")]
    assert any("w0 & w1 <both> wrote 2" in tip for tip in tips)  # escaped, and read back whole
    assert any(tip.startswith("w0 token 4:") and "ended by end" in tip for tip in tips)


def test_timeline_title_escapes_the_store_url_and_says_pass_or_fail(tmp_path: Path) -> None:
    failed = svg_of(render_timeline(run_info(), HISTORY, FINDINGS))
    assert STORE in (marks(failed, "headline")[0].text or "")
    assert marks(failed, "verdict")[0].text == "FAIL: 1 violation"
    path = tmp_path / "timeline.html"
    write_timeline(path, run_info(scenario="<x>"), HISTORY, [])
    page = path.read_text(encoding="utf-8")
    assert marks(svg_of(page), "verdict")[0].text == "PASS"
    assert "<x>" not in page


def test_timeline_of_an_empty_run_still_has_every_lane() -> None:
    svg = svg_of(render_timeline(run_info(workers=12, ended=T0), [], []))
    assert [e.text for e in marks(svg, "lane-label")] == [f"w{i}" for i in range(12)]
    assert not marks(svg, "lease")
