"""The chaos checkers against hand-built histories: each must stay quiet on a clean run and name
exactly the planted violation, so a checker that always says "fine" fails here."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tenure.chaos.checks import (
    CHECKS,
    GATED,
    OWNERLESS_SLACK,
    check_all,
    check_belief_overlap,
    check_cursor_regression,
    check_item_overlap,
    check_item_ownerless,
    check_lost_updates,
    check_one_leader_per_term,
    check_stale_item_writes,
    check_stale_tokens,
    check_token_order,
    check_work_overlap,
    item_windows,
    ownerless_bound,
    violations,
    work_spans,
)
from tenure.chaos.history import (
    NEMESIS,
    Accepted,
    Event,
    Finding,
    Phase,
    ResourceLog,
    WorkRecord,
    read_work,
)

# --- builders -------------------------------------------------------------------------------


def history(*groups: list[Event]) -> list[Event]:
    """Merge per-operation event lists into one time-ordered history."""
    return sorted((e for group in groups for e in group), key=lambda e: e.t)


def grant(process: str, token: int, asked: float, granted: float, name: str = "L") -> list[Event]:
    return [
        Event(asked, process, "acquire", "invoke", value={"name": name}),
        Event(granted, process, "acquire", "ok", token=token, value={"deadline": granted + 9}),
    ]


def op(t: float, process: str, f: str, token: int | None = None, **value: Any) -> list[Event]:
    """A one-off event: a release invoke, a lost info, a start, a nemesis fault."""
    phase: Phase = "invoke" if f == "release" else "info"
    return [Event(t, process, f, phase, token=token, value=value or None)]


def write_ok(t: float, process: str, token: int, **value: Any) -> list[Event]:
    return [
        Event(t, process, "write", "invoke", token=token, value=value),
        Event(t + 0.01, process, "write", "ok", token=token, value=value),
    ]


def log(workload: str, writes: list[tuple[str, int, dict[str, Any]]], final: Any) -> ResourceLog:
    accepted = [Accepted(seq, p, token, data) for seq, (p, token, data) in enumerate(writes, 1)]
    return ResourceLog(workload, accepted, final)


def counter(*writes: tuple[str, int, int], final: int | None = None) -> ResourceLog:
    """Accepted counter writes as (process, token, old); each sets old+1."""
    rows = [(p, token, {"old": old, "new": old + 1}) for p, token, old in writes]
    return log("counter", rows, len(rows) if final is None else final)


def checks(findings: list[Finding]) -> list[str]:
    return [f.check for f in findings]


# --- lost updates ---------------------------------------------------------------------------


def test_counter_clean_run_has_no_lost_update() -> None:
    runs = history(write_ok(1, "w1", 1, old=0, new=1), write_ok(2, "w2", 2, old=1, new=2))
    assert check_lost_updates(runs, counter(("w1", 1, 0), ("w2", 2, 1))) == []


def test_counter_overwrite_is_a_lost_update() -> None:
    # Both read 0 (unfenced); the second write of 1 overwrote the first.
    runs = history(write_ok(1, "w1", 1, old=0, new=1), write_ok(2, "w2", 2, old=0, new=1))
    findings = check_lost_updates(runs, counter(("w1", 1, 0), ("w2", 2, 0), final=1))
    assert checks(findings) == ["lost-update", "lost-update"]
    assert "write #2 by w2 token 2 set 1 from a read of 0, but the counter held 1" in (
        findings[0].message
    )
    assert findings[0].processes == ("w2",)
    assert findings[1].message == "final counter 1 != 2 accepted writes"


def test_acknowledged_write_missing_from_resource_is_a_lost_update() -> None:
    runs = history(write_ok(1, "w1", 1, old=0, new=1), write_ok(2, "w3", 3, old=1, new=2))
    [finding] = check_lost_updates(runs, counter(("w1", 1, 0)))
    assert finding.check == "lost-update"
    assert finding.message == (
        "w3 token 3 was told its write 1->2 succeeded, but the resource has no such write"
    )
    assert finding.t == pytest.approx(2.01)
    assert finding.processes == ("w3",)


def test_final_value_differing_from_accepted_count_is_a_lost_update() -> None:
    [finding] = check_lost_updates([], counter(("w1", 1, 0), ("w2", 2, 1), final=3))
    assert finding.message == "final counter 3 != 2 accepted writes"


def test_set_clean_run_has_no_lost_update() -> None:
    runs = history(write_ok(1, "w1", 1, element="a"), write_ok(2, "w2", 2, element="b"))
    resource = log("set", [("w1", 1, {"element": "a"}), ("w2", 2, {"element": "b"})], ["a", "b"])
    assert check_lost_updates(runs, resource) == []


def test_set_element_overwritten_is_a_lost_update() -> None:
    runs = history(write_ok(1, "w1", 1, element="a"), write_ok(2, "w2", 2, element="b"))
    resource = log("set", [("w1", 1, {"element": "a"}), ("w2", 2, {"element": "b"})], ["b"])
    [finding] = check_lost_updates(runs, resource)
    assert finding.check == "lost-update"
    assert "element 'a' (acknowledged to w1 token 1) is missing from the final set" in (
        finding.message
    )
    assert finding.processes == ("w1",)


def test_election_has_no_lost_update_check() -> None:
    resource = log("election", [("w1", 5, {"term": 5, "leader": "w1", "n": 1})], None)
    assert check_lost_updates(history(write_ok(1, "w9", 9, old=0, new=1)), resource) == []


def test_unknown_workload_is_refused_not_passed() -> None:
    with pytest.raises(ValueError, match="unknown workload"):
        check_lost_updates([], log("queue", [], None))


# --- stale tokens ---------------------------------------------------------------------------


def test_equal_and_growing_tokens_are_not_stale() -> None:
    assert check_stale_tokens(counter(("w1", 1, 0), ("w1", 1, 1), ("w2", 4, 2))) == []


def test_stale_token_accepted() -> None:
    [finding] = check_stale_tokens(counter(("w1", 1, 0), ("w2", 2, 1), ("w1", 1, 2)))
    assert finding.check == "stale-token"
    assert finding.message == "write #3 by w1 with token 1 accepted after token 2 (write #2 by w2)"
    assert finding.processes == ("w2", "w1")


# --- token order ----------------------------------------------------------------------------


def test_sequential_growing_tokens_are_in_order() -> None:
    runs = history(grant("w1", 1, 0, 1), grant("w2", 2, 2, 3), grant("w1", 5, 4, 5))
    assert check_token_order(runs) == []


def test_duplicate_token() -> None:
    runs = history(grant("w1", 5, 0, 1), grant("w2", 5, 2, 3))
    [finding] = check_token_order(runs)
    assert finding.check == "duplicate-token"
    assert finding.message == "lock 'L' token 5 granted 2 times: w1, w2"
    assert finding.processes == ("w1", "w2")


def test_token_order_inverted() -> None:
    runs = history(grant("w1", 7, 0, 1), grant("w2", 5, 2, 3))
    [finding] = check_token_order(runs)
    assert finding.check == "token-order"
    assert finding.message == (
        "lock 'L': w2 got token 5, lower than token 7 granted to w1 1000.0 ms before it asked"
    )
    assert finding.t == 3
    assert finding.processes == ("w1", "w2")


@pytest.mark.parametrize(("a", "b"), [(7, 5), (5, 7)])
def test_concurrent_grants_may_come_in_either_order(a: int, b: int) -> None:
    assert check_token_order(history(grant("w1", a, 0, 2), grant("w2", b, 1, 3))) == []


def test_each_violating_grant_is_reported_once() -> None:
    # Two higher grants precede w3's; w4 is also below the highest: one finding each.
    runs = history(
        grant("w1", 8, 0, 1), grant("w2", 9, 2, 3), grant("w3", 3, 4, 5), grant("w4", 4, 6, 7)
    )
    findings = check_token_order(runs)
    assert checks(findings) == ["token-order", "token-order"]
    assert [f.processes for f in findings] == [("w2", "w3"), ("w2", "w4")]


def test_tokens_of_different_locks_are_independent() -> None:
    runs = history(grant("w1", 9, 0, 1, name="x"), grant("w2", 1, 2, 3, name="y"))
    assert check_token_order(runs) == []


def test_grant_paired_with_its_own_process_invoke() -> None:
    # w2 asked long before w1 finished; interleaved invokes must not be confused.
    runs = history(grant("w2", 3, 0, 4), grant("w1", 7, 1, 2))
    assert check_token_order(runs) == []


# --- elections ------------------------------------------------------------------------------


def election(*entries: tuple[str, int]) -> ResourceLog:
    """Accepted election log entries as (leader, term); the leader is the writing process."""
    rows = [(p, term, {"term": term, "leader": p, "n": n}) for n, (p, term) in enumerate(entries)]
    return log("election", rows, None)


def test_one_leader_per_growing_term_is_clean() -> None:
    assert check_one_leader_per_term(election(("w1", 1), ("w1", 1), ("w2", 2), ("w3", 5))) == []


def test_two_leaders_in_one_term() -> None:
    [finding] = check_one_leader_per_term(election(("w1", 3), ("w2", 3), ("w1", 3)))
    assert finding.check == "two-leaders"
    assert finding.message == (
        "term 3 has writes from 2 leaders: w1 (first write #1 by w1), w2 (first write #2 by w2)"
    )
    assert finding.processes == ("w1", "w2")


def test_term_regression() -> None:
    [finding] = check_one_leader_per_term(election(("w1", 1), ("w2", 2), ("w1", 1)))
    assert finding.check == "term-regression"
    assert finding.message == "write #3 by w1 in term 1 accepted after term 2 (write #2 by w2)"


def test_leader_check_applies_to_elections_only() -> None:
    assert check_one_leader_per_term(counter(("w1", 2, 0), ("w2", 1, 1))) == []


# --- belief overlap -------------------------------------------------------------------------


def test_overlapping_beliefs_are_one_diagnostic() -> None:
    # w1 is paused past its lease: it notices the loss only at 1.8, w2 holds 1.0-1.5.
    runs = history(
        grant("w1", 1, 0, 0.1),
        grant("w2", 2, 0.9, 1.0),
        op(1.5, "w2", "release", token=2),
        op(1.8, "w1", "lost", token=1),
    )
    [finding] = check_belief_overlap(runs)
    assert finding.check == "belief-overlap"
    assert finding.gated is False
    assert finding.t == 1.0
    assert finding.processes == ("w1", "w2")
    assert "both for 500.0 ms" in finding.message and finding.t == 1.0


@pytest.mark.parametrize(
    "end_of_w1",
    [
        op(0.5, "w1", "release", token=1),
        op(0.5, "w1", "lost", token=1),
        op(0.5, NEMESIS, "kill", target="w1"),
        op(0.5, "w1", "start"),
    ],
    ids=["release", "lost", "kill", "restart"],
)
def test_belief_ends_before_the_next_grant(end_of_w1: list[Event]) -> None:
    w2 = [*grant("w2", 2, 0.9, 1.0), *op(2.0, "w2", "release", token=2)]
    assert check_belief_overlap(history(grant("w1", 1, 0, 0.1), w2))  # bites without the end
    runs = history(grant("w1", 1, 0, 0.1), end_of_w1, w2)
    assert check_belief_overlap(runs) == []


def test_belief_ends_only_by_its_own_token_or_process() -> None:
    runs = history(
        grant("w1", 1, 0, 0.1),
        op(0.3, "w1", "release", token=99),  # another lease's release
        op(0.4, NEMESIS, "kill", target="w3"),  # another worker killed
        grant("w2", 2, 0.9, 1.0),
        op(2.0, "w2", "release", token=2),  # w1's belief runs to the end of the history
    )
    [finding] = check_belief_overlap(runs)
    assert "for 1000.0 ms" in finding.message and finding.t == 1.0
    assert finding.processes == ("w1", "w2")


def test_beliefs_on_different_locks_or_one_process_do_not_overlap() -> None:
    runs = history(
        grant("w1", 1, 0, 0.1, name="x"),
        grant("w2", 1, 0, 0.2, name="y"),
        grant("w1", 3, 0.3, 0.4, name="x"),  # w1 again, the first grant never released
    )
    assert check_belief_overlap(runs) == []


# --- check_all and violations ---------------------------------------------------------------


def test_violations_counts_gated_findings_with_every_key() -> None:
    findings = [
        Finding("stale-token", "a"),
        Finding("stale-token", "b"),
        Finding("token-order", "c"),
        Finding("belief-overlap", "d", gated=False),
    ]
    counts = violations(findings)
    assert counts == {name: 0 for name in GATED} | {"stale-token": 2, "token-order": 1}
    assert "belief-overlap" not in counts
    assert set(GATED) < set(CHECKS)


def test_check_all_on_a_fenced_run_with_a_paused_holder() -> None:
    # w1 paused past its lease; w2 took over and wrote; w1's late write was refused by the fence.
    runs = history(
        grant("w1", 1, 0, 0.1),
        write_ok(0.2, "w1", 1, old=0, new=1),
        grant("w2", 2, 0.9, 1.0),
        write_ok(1.1, "w2", 2, old=1, new=2),
        op(1.5, "w2", "release", token=2),
        op(1.8, "w1", "lost", token=1),
    )
    findings = check_all(runs, counter(("w1", 1, 0), ("w2", 2, 1)))
    assert checks(findings) == ["belief-overlap"]
    assert all(count == 0 for count in violations(findings).values())


def test_check_all_on_an_unfenced_run_bites() -> None:
    runs = history(grant("w1", 1, 0, 0.1), grant("w2", 2, 0.9, 1.0))
    findings = check_all(runs, counter(("w2", 2, 0), ("w1", 1, 0), final=1))
    assert violations(findings)["lost-update"] == 2
    assert violations(findings)["stale-token"] == 1


# --- work under tenure run ---------------------------------------------------------------


def worked(
    child: str, token: int, start: float, end: float, tick: float = 0.02
) -> list[WorkRecord]:
    """A child's records, one per tick from ``start`` to ``end``."""
    count = round((end - start) / tick)
    return [WorkRecord(child, token, start + i * tick) for i in range(count + 1)]


def test_commands_one_after_another_do_not_overlap() -> None:
    # w0's command stops at 1.0; w1's starts 30 ms later; w0's next one after w1's ends.
    work = [*worked("w0-0", 1, 0, 1.0), *worked("w1-0", 2, 1.03, 2.0), *worked("w0-1", 3, 2.1, 3)]
    assert check_work_overlap(work) == []
    assert [s.child for s in work_spans(work)] == ["w0-0", "w1-0", "w0-1"]


def test_two_commands_working_at_once_are_reported() -> None:
    # w0's command works on for 0.5 s after w1's started (a too-long grace), and a third one
    # recorded once, at 1.7, while w1's still worked (a frozen command woken up, then killed).
    work = [*worked("w0-0", 1, 0, 1.5), *worked("w1-0", 2, 1.0, 2.0), WorkRecord("w2-4", 3, 1.7)]
    findings = check_work_overlap(work)
    assert checks(findings) == ["work-overlap", "work-overlap"]
    first, second = findings
    assert first.gated and first.t == pytest.approx(1.0)
    assert first.processes == ("w0", "w1")
    assert first.message == "w0-0 (token 1) and w1-0 (token 2) worked at once for 500.0 ms"
    assert second.processes == ("w1", "w2") and second.t == pytest.approx(1.7)
    assert second.message == "w1-0 (token 2) and w2-4 (token 3) worked at once for 0.0 ms"
    assert violations(findings)["work-overlap"] == 2


def test_a_frozen_command_does_no_work_while_frozen() -> None:
    # w0's command is frozen from 1.0 to 3.0 and killed on waking (no record after): w1 worked
    # in between, never at the same time as w0's.
    work = [*worked("w0-0", 1, 0, 1.0), *worked("w1-0", 2, 1.6, 2.8)]
    assert check_work_overlap(work) == []
    # Woken at 3.0 while w1 still works: the records after the silence overlap.
    woken = [*work, *worked("w0-0", 1, 3.0, 3.1), *worked("w1-0", 2, 2.8, 3.5)]
    [finding] = check_work_overlap(woken)
    assert finding.t == pytest.approx(3.0)
    assert "for 100.0 ms" in finding.message
    spans = [(round(s.start, 3), round(s.end, 3)) for s in work_spans(woken) if s.child == "w0-0"]
    assert spans == [(0.0, 1.0), (3.0, 3.1)]


def test_work_files_are_read_without_torn_lines(tmp_path: Path) -> None:
    (tmp_path / "w0-0.work").write_text("1.000000 7\n1.020000 7\n1.04")  # killed mid-line
    (tmp_path / "w1-0.work").write_text("0.500000 6\n")
    assert read_work(tmp_path) == [
        WorkRecord("w1-0", 6, 0.5),
        WorkRecord("w0-0", 7, 1.0),
        WorkRecord("w0-0", 7, 1.02),
    ]


# --- property: token order ------------------------------------------------------------------

# Sequential grants: (process, ask delay after the previous grant, time to grant, token step).
sequential = st.lists(
    st.tuples(
        st.sampled_from(["w1", "w2", "w3"]),
        st.floats(min_value=0.001, max_value=5),
        st.floats(min_value=0, max_value=5),
        st.integers(min_value=1, max_value=1000),
    ),
    min_size=2,
    max_size=40,
)
Grant = tuple[str, int, float, float]  # grant()'s arguments: process, token, asked, granted


def one_after_another(rows: list[tuple[str, float, float, int]]) -> list[Grant]:
    """Each grant asked strictly after the previous one completed, with a higher token."""
    t, token, grants = 0.0, 0, []
    for process, delay, duration, step in rows:
        asked, token = t + delay, token + step
        t = asked + duration
        grants.append((process, token, asked, t))
    return grants


@given(sequential)
def test_sequential_growing_tokens_never_flagged(rows: list[tuple[str, float, float, int]]) -> None:
    grants = one_after_another(rows)
    assert check_token_order(history(*(grant(*g) for g in grants))) == []


@given(sequential, st.data())
def test_swapped_tokens_of_sequential_grants_flagged(
    rows: list[tuple[str, float, float, int]], data: st.DataObject
) -> None:
    grants = one_after_another(rows)
    i = data.draw(st.integers(0, len(grants) - 2))
    j = data.draw(st.integers(i + 1, len(grants) - 1))
    (p, a, asked_a, got_a), (q, b, asked_b, got_b) = grants[i], grants[j]
    grants[i], grants[j] = (p, b, asked_a, got_a), (q, a, asked_b, got_b)
    findings = check_token_order(history(*(grant(*g) for g in grants)))
    assert findings and set(checks(findings)) == {"token-order"}
    assert got_b in [f.t for f in findings]  # the later grant, now with the lower token


def test_a_term_the_observer_never_saw_is_a_violation() -> None:
    from tenure.chaos.checks import OBSERVER, check_observed_terms

    entries = [
        (f"w{term}", term, {"term": term, "leader": f"w{term}", "n": 0}) for term in (1, 2, 3)
    ]
    resource = log("election", entries, None)
    seen = [Event(t=float(term), process=OBSERVER, f="observe", type="info", token=term)
            for term in (1, 3)]  # fmt: skip
    [finding] = check_observed_terms(seen, resource)
    assert finding.check == "unobserved-term" and finding.gated
    assert "term 2 (leader w2)" in finding.message
    every = [*seen, Event(t=2.0, process=OBSERVER, f="observe", type="info", token=2)]
    assert check_observed_terms(every, resource) == []
    restart = Event(t=1.5, process=NEMESIS, f="store-restart", type="invoke", value={})
    [after_fault] = check_observed_terms([*seen, restart], resource)
    assert not after_fault.gated  # a watch may start over from the current state
    assert check_observed_terms([], resource) == []  # no observer in this run


# --- partition ownership ------------------------------------------------------------------

ITEMS = ["a", "b"]


def own(t: float, process: str, item: str, token: int, deadline: float | None) -> list[Event]:
    value: dict[str, Any] = {"item": item}
    if deadline is not None:
        value["deadline"] = deadline
    return [Event(t, process, "own", "info", token=token, value=value)]


def disown(t: float, process: str, item: str, token: int, why: str = "leaving") -> list[Event]:
    return [Event(t, process, "disown", "info", token=token, value={"item": item, "why": why})]


def item_write(t: float, process: str, item: str, token: int, deadline: float) -> list[Event]:
    """A write's invoke with the item's deadline then (a renewal moves it on), and its ok."""
    value = {"item": item, "old": 0, "new": 1}
    return [
        Event(t, process, "write", "invoke", token=token, value={**value, "deadline": deadline}),
        Event(t + 0.01, process, "write", "ok", token=token, value=value),
    ]


def fault(kind: str, target: str, start: float, end: float | None = None) -> list[Event]:
    if end is None:
        return [Event(start, NEMESIS, kind, "info", value={"target": target})]
    return [
        Event(start, NEMESIS, kind, "invoke", value={"target": target}),
        Event(end, NEMESIS, kind, "ok", value={"target": target}),
    ]


def items_log(*writes: tuple[str, int, str], ttl: float = 1.0) -> ResourceLog:
    """Accepted partition writes as (process, token, item), each item a counter from 0."""
    counts: dict[str, int] = dict.fromkeys(ITEMS, 0)
    accepted = []
    for seq, (process, token, item) in enumerate(writes, 1):
        data = {"item": item, "old": counts[item], "new": counts[item] + 1}
        counts[item] += 1
        accepted.append(Accepted(seq, process, token, data))
    settings = {"items": ITEMS, "ttl": ttl, "lock_delay": 0.0}
    return ResourceLog("partition", accepted, counts, settings)


def test_item_owners_one_after_another_do_not_overlap() -> None:
    runs = history(
        own(0.0, "w1", "a", 1, deadline=0.8),
        item_write(0.5, "w1", "a", 1, deadline=1.3),  # renewed meanwhile
        disown(1.0, "w1", "a", 1),  # leaving: released after this
        own(1.1, "w2", "a", 2, deadline=1.9),
        own(0.2, "w2", "b", 1, deadline=9),  # another item, owned at the same time
    )
    assert check_item_overlap(runs) == []


def test_two_owners_of_one_item_before_their_deadlines_are_a_violation() -> None:
    runs = history(
        own(0.0, "w1", "a", 1, deadline=0.8),
        item_write(0.5, "w1", "a", 1, deadline=1.3),  # w1 may act until 1.3
        own(1.0, "w2", "a", 2, deadline=1.8),
        disown(2.0, "w1", "a", 1, why="lost"),
    )
    [finding] = check_item_overlap(runs)
    assert finding.check == "item-overlap" and finding.gated
    assert finding.processes == ("w1", "w2") and finding.t == 1.0
    assert "item 'a'" in finding.message and "both for 300.0 ms" in finding.message


def test_a_paused_owner_owns_an_item_only_until_its_deadline() -> None:
    # w1 froze at 0.3 with deadline 0.8; w2 got the item at 1.0; w1 woke at 1.5 and wrote (its
    # deadline gone: the write records none) before it saw the loss at 1.6.
    late = Event(1.5, "w1", "write", "invoke", token=1, value={"item": "a", "old": 0, "new": 1})
    runs = history(
        own(0.0, "w1", "a", 1, deadline=0.8),
        own(1.0, "w2", "a", 2, deadline=1.8),
        [late],
        disown(1.6, "w1", "a", 1, why="lost"),
    )
    assert check_item_overlap(runs) == []
    [window] = [w for w in item_windows(runs) if w.process == "w1"]
    assert (window.end, window.ended_by) == (0.8, "deadline")


def test_a_grant_heard_of_after_its_deadline_is_no_ownership() -> None:
    # w1 was granted token 4 and paused before its consumer heard of it; w0 got token 5 after
    # it expired; w1 woke up, read the old grant (its deadline gone: none recorded), then left.
    runs = history(
        own(7.08, "w0", "a", 5, deadline=7.5),
        own(7.76, "w1", "a", 4, deadline=None),
        disown(7.77, "w1", "a", 4),
        item_write(7.3, "w0", "a", 5, deadline=8.2),
    )
    assert check_item_overlap(runs) == []
    [window] = [w for w in item_windows(runs) if w.process == "w1"]
    assert (window.start, window.end, window.ended_by) == (7.76, 7.76, "deadline")
    told_in_time = history(
        own(7.08, "w0", "a", 5, 7.5),
        own(7.76, "w1", "a", 4, 8.0),  # the same, with its deadline still ahead: two owners
        disown(7.77, "w1", "a", 4),
        item_write(7.3, "w0", "a", 5, 8.2),
    )
    assert checks(check_item_overlap(told_in_time)) == ["item-overlap"]


@pytest.mark.parametrize(
    "end_of_w1",
    [
        disown(0.5, "w1", "a", 1),
        fault("kill", "w1", 0.5),
        op(0.5, "w1", "start"),
    ],
    ids=["disown", "kill", "restart"],
)
def test_an_item_is_let_go_by_disown_kill_or_restart(end_of_w1: list[Event]) -> None:
    w2 = [*own(1.0, "w2", "a", 2, deadline=9), *disown(2.0, "w2", "a", 2)]
    assert check_item_overlap(history(own(0.0, "w1", "a", 1, deadline=9), w2))  # bites
    assert check_item_overlap(history(own(0.0, "w1", "a", 1, deadline=9), end_of_w1, w2)) == []


def test_a_stale_item_write_accepted_is_a_violation() -> None:
    resource = items_log(("w1", 1, "a"), ("w2", 2, "a"), ("w1", 1, "a"))
    [finding] = check_stale_item_writes(resource)
    assert finding.check == "stale-item-write" and finding.gated
    assert "item 'a': write #3 by w1 with token 1 accepted after token 2" in finding.message
    assert finding.processes == ("w2", "w1")


def test_tokens_of_different_items_are_independent() -> None:
    resource = items_log(("w1", 5, "a"), ("w2", 1, "b"), ("w2", 5, "a"), ("w2", 2, "b"))
    assert check_stale_item_writes(resource) == []
    assert check_stale_tokens(resource) == []  # the one-resource check stands aside
    assert check_lost_updates([], resource) == []
    assert check_stale_item_writes(counter(("w2", 2, 0), ("w1", 1, 1))) == []  # not partition


def test_an_item_overwritten_is_a_lost_update() -> None:
    resource = items_log(("w1", 1, "a"), ("w2", 2, "a"))
    resource.accepted[1] = replace(resource.accepted[1], data={"item": "a", "old": 0, "new": 1})
    resource.final["a"] = 1
    found = check_lost_updates([], resource)
    assert checks(found) == ["lost-update", "lost-update"]  # the overwrite, the final count


def owned_until_end(*rest: list[Event]) -> list[Event]:
    """Item b owned all along by w3; the run stops at 10 s."""
    return history(own(0.0, "w3", "b", 1, deadline=99), op(10.0, "w3", "stop"), *rest)


def test_items_owned_again_within_the_bound_are_fine() -> None:
    # ttl 1: the bound is 1 + 0 + 1/3 + 1 s. w1 killed at 2.0; w2 owns a from 3.5 (1.5 s).
    runs = owned_until_end(
        own(0.0, "w1", "a", 1, deadline=99), fault("kill", "w1", 2.0), own(3.5, "w2", "a", 2, 99)
    )
    assert ownerless_bound(1.0, 0.0) == pytest.approx(1 + 1 / 3 + OWNERLESS_SLACK)
    assert check_item_ownerless(runs, items_log()) == []


def test_an_item_ownerless_too_long_after_a_kill_is_a_violation() -> None:
    runs = owned_until_end(
        own(0.0, "w1", "a", 1, deadline=99), fault("kill", "w1", 2.0), own(4.5, "w2", "a", 2, 99)
    )
    [finding] = check_item_ownerless(runs, items_log())
    assert finding.check == "item-ownerless" and finding.gated and finding.t == 4.5
    assert "item 'a' had no owner for 2500 ms, 2.50 s after it was let go" in finding.message


def test_ownerless_time_counts_from_the_fault_healing() -> None:
    # a pause of w1 from 2.0 to 5.0: a is taken over by w2 only at 5.5, 0.5 s after it healed
    paused = [*own(0.0, "w1", "a", 1, deadline=2.5), *fault("pause", "w1", 2.0, 5.0)]
    healed = owned_until_end(paused, own(5.5, "w2", "a", 2, 99))
    assert check_item_ownerless(healed, items_log()) == []  # 5.5 s ownerless, but paused
    late = check_item_ownerless(owned_until_end(paused, own(7.5, "w2", "a", 2, 99)), items_log())
    assert len(late) == 1 and "2.50 s after the last fault healed" in late[0].message
    assert check_item_ownerless(owned_until_end(paused, own(7.5, "w2", "a", 2, 99)),
                                items_log(ttl=5.0)) == []  # fmt: skip
    # owned again while the fault is still under way: nothing to judge
    during = history(
        own(0.0, "w1", "a", 1, 0.5), fault("pause", "w1", 0.2, 9.0), own(5, "w2", "a", 2, 99)
    )
    assert check_item_ownerless(owned_until_end(during), items_log()) == []


def test_an_item_never_owned_or_ownerless_at_the_end_is_a_violation() -> None:
    never = check_item_ownerless(history(op(10.0, "w3", "stop")), items_log())
    assert [f.message for f in never] == ["item 'a' was never owned", "item 'b' was never owned"]
    ended = owned_until_end(own(0.0, "w1", "a", 1, deadline=99), disown(3.0, "w1", "a", 1))
    [finding] = check_item_ownerless(ended, items_log())  # no owner from 3.0 to the stop at 10
    assert finding.t == 10.0
    assert check_item_ownerless(ended, counter()) == []  # partition runs only


def test_check_all_reports_the_partition_checks_gated() -> None:
    runs = owned_until_end(
        own(0.0, "w1", "a", 1, deadline=9), own(1.0, "w2", "a", 2, deadline=9),
        op(2.0, NEMESIS, "kill", target="w1"),
    )  # fmt: skip
    counts = violations(check_all(runs, items_log(("w2", 2, "a"), ("w1", 1, "a"))))
    assert counts["item-overlap"] == 1 and counts["stale-item-write"] == 1
    assert counts["item-ownerless"] == 0 and counts["stale-token"] == 0
    assert {"item-overlap", "stale-item-write", "item-ownerless"} <= set(GATED)


# --- semaphores -----------------------------------------------------------------------------


def permit(process: str, slot: int, token: int, granted: float, deadline: float) -> list[Event]:
    name = f"semaphore/S/{slot}"
    return [
        Event(granted - 0.01, process, "acquire", "invoke", value={"semaphore": "S"}),
        Event(granted, process, "acquire", "ok", token=token,
              value={"name": name, "deadline": deadline}),
    ]  # fmt: skip


SEMAPHORE_LOG = ResourceLog("semaphore", [], {"slot-0": 0, "slot-1": 0}, {"permits": 2})


def test_two_permits_held_at_once_are_fine_and_a_third_bites() -> None:
    from tenure.chaos.checks import check_permit_overlap

    two = history(
        permit("w1", 0, 1, 0.0, 9.0), permit("w2", 1, 1, 1.0, 9.0),
        op(3.0, "w1", "release", 1), permit("w3", 0, 2, 3.0, 9.0),  # w1's slot, after it
    )  # fmt: skip
    assert check_permit_overlap(two, SEMAPHORE_LOG) == []
    three = history(two[:4], permit("w3", 0, 2, 2.0, 9.0), op(3.0, "w1", "release", 1))
    [finding] = check_permit_overlap(three, SEMAPHORE_LOG)
    assert finding.check == "permit-overlap" and finding.gated
    assert set(finding.processes) == {"w1", "w2", "w3"} and "3 workers" in finding.message
    assert check_all(three, SEMAPHORE_LOG) and checks(check_all(two, SEMAPHORE_LOG)) == []


def test_a_permit_ends_at_its_holders_deadline() -> None:
    """A holder paused past its deadline still believes, but may not act: not a third holder."""
    from tenure.chaos.checks import check_permit_overlap, permit_windows

    paused = history(
        permit("w1", 0, 1, 0.0, 2.0), permit("w2", 1, 1, 0.5, 9.0),
        permit("w3", 0, 2, 3.0, 9.0),  # slot 0 again, once w1's deadline passed
        op(5.0, "w1", "release", 1),
    )  # fmt: skip
    assert check_permit_overlap(paused, SEMAPHORE_LOG) == []
    w1 = next(w for w in permit_windows(paused) if w.process == "w1")
    assert w1.end == 2.0
    renewed = history(paused, write_ok(1.9, "w1", 1, item="slot-0", deadline=4.0))
    assert checks(check_permit_overlap(renewed, SEMAPHORE_LOG)) == ["permit-overlap"]


def test_a_later_permit_with_the_same_token_on_another_slot_does_not_stretch_an_earlier() -> None:
    """Each slot counts its own tokens: w1, paused past its slot-0 deadline, notices the loss
    after w3 took slot 0, then gets token 1 of slot 1; that permit's deadline must not keep
    the first open beside w3's (a false third holder, seen in a CI run)."""
    from tenure.chaos.checks import check_permit_overlap, permit_windows

    reused = history(
        permit("w1", 0, 1, 0.0, 1.0), permit("w2", 1, 1, 0.5, 9.0),
        permit("w3", 0, 2, 1.2, 9.0), op(1.5, "w1", "lost", 1),  # w1 believed until 1.5
        op(1.6, "w2", "release", 1), permit("w1", 1, 1, 1.7, 9.0),  # slot 1's token 1, again
        write_ok(1.8, "w1", 1, item="slot-1", deadline=9.5),
    )  # fmt: skip
    assert check_permit_overlap(reused, SEMAPHORE_LOG) == []
    first = next(w for w in permit_windows(reused) if w.process == "w1")
    assert first.end == 1.0


# --- read-write locks -----------------------------------------------------------------------


def rw_grant(
    process: str, token: int, mode: str, granted: float, deadline: float, slot: int = 0
) -> list[Event]:
    """An ``rwlock`` grant as the worker records it: the invoke names the read-write lock,
    the ok the lease's own lock (a reader's slot, a writer's gate), its mode and deadline."""
    lock = "rwlock/L/gate" if mode == "write" else f"rwlock/L/{slot}"
    return [
        Event(granted - 0.01, process, "acquire", "invoke", value={"name": "L", "mode": mode}),
        Event(granted, process, "acquire", "ok", token=token,
              value={"name": lock, "mode": mode, "deadline": deadline}),
    ]  # fmt: skip


def rw_read(
    t: float, process: str, token: int, value: int | None, mode: str = "read"
) -> list[Event]:
    """A read; ``value`` None: the fence refused it."""
    asked = {"mode": mode, "deadline": 0.0}  # the deadline then: past (never a later one)
    done = (
        Event(t + 0.01, process, "read", "fail", token=token, error="stale")
        if value is None
        else Event(t + 0.01, process, "read", "ok", token=token, value=value)
    )
    return [Event(t, process, "read", "invoke", token=token, value=asked), done]


def rw_log(*writes: tuple[str, int, int, float], final: int | None = None) -> ResourceLog:
    """Accepted writer writes as (process, token, old, commit time); each sets old+1."""
    accepted = [
        Accepted(seq, p, token, {"old": old, "new": old + 1}, t)
        for seq, (p, token, old, t) in enumerate(writes, 1)
    ]
    return ResourceLog("rwlock", accepted, len(accepted) if final is None else final, {})


def paused_reader(second_read: int | None) -> list[Event]:
    """Reader w1 (token 2, deadline 0.5) reads 0 and is paused; writer w2 (token 3, granted
    once w1's deadline passed) reads and writes 0 -> 1; w1 wakes and reads again."""
    return history(
        rw_grant("w1", 2, "read", 0.0, deadline=0.5), rw_read(0.1, "w1", 2, 0),
        rw_grant("w2", 3, "write", 1.0, deadline=9.0), rw_read(1.1, "w2", 3, 0, "write"),
        write_ok(1.2, "w2", 3, old=0, new=1), op(1.3, "w2", "release", 3),
        rw_read(2.0, "w1", 2, second_read), op(2.1, "w1", "release", 2),
    )  # fmt: skip


def test_a_reader_seeing_a_write_between_its_reads_bites() -> None:
    from tenure.chaos.checks import check_writer_beside_reader

    runs = paused_reader(second_read=1)  # unfenced: the stale reader's read is served
    [finding] = check_writer_beside_reader(runs, rw_log(("w2", 3, 0, 1.21)))
    assert finding.check == "writer-beside-reader" and finding.gated
    assert "w1 (read lock, token 2) read 0, then 1" in finding.message
    assert "write #1 by w2 token 3" in finding.message
    assert set(finding.processes) == {"w1", "w2"}
    counts = violations(check_all(runs, rw_log(("w2", 3, 0, 1.21))))
    assert counts["writer-beside-reader"] == 1 and counts["lost-update"] == 0
    assert "writer-beside-reader" in GATED


def test_a_stale_reader_refused_and_readers_side_by_side_pass() -> None:
    from tenure.chaos.checks import check_writer_beside_reader

    fenced = paused_reader(second_read=None)  # admit_read refused the read after the write
    assert check_writer_beside_reader(fenced, rw_log(("w2", 3, 0, 1.21))) == []
    readers = history(  # three readers at once, each reading one value twice; a writer after
        rw_grant("w1", 1, "read", 0.0, 9.0, slot=0), rw_read(0.1, "w1", 1, 0),
        rw_grant("w2", 2, "read", 0.2, 9.0, slot=1), rw_read(0.3, "w2", 2, 0),
        rw_grant("w3", 3, "read", 0.4, 9.0, slot=2), rw_read(0.5, "w3", 3, 0),
        rw_read(0.6, "w1", 1, 0), rw_read(0.7, "w2", 2, 0), rw_read(0.8, "w3", 3, 0),
        op(0.9, "w1", "release", 1), op(0.9, "w2", "release", 2), op(0.9, "w3", "release", 3),
        rw_grant("w4", 4, "write", 1.0, 9.0), rw_read(1.1, "w4", 4, 0, "write"),
        write_ok(1.2, "w4", 4, old=0, new=1), op(1.3, "w4", "release", 4),
        rw_grant("w1", 5, "read", 1.4, 9.0), rw_read(1.5, "w1", 5, 1), rw_read(1.6, "w1", 5, 1),
    )  # fmt: skip
    log = rw_log(("w4", 4, 0, 1.21))
    assert check_writer_beside_reader(readers, log) == []
    assert checks(check_all(readers, log)) == []  # belief-overlap judges each slot alone


def test_a_writer_granted_beside_a_reader_bites_until_the_readers_deadline() -> None:
    from tenure.chaos.checks import check_writer_beside_reader

    def run(reader_deadline: float, *rest: list[Event]) -> list[Event]:
        return history(
            rw_grant("w1", 1, "read", 0.0, reader_deadline), rw_read(0.1, "w1", 1, 0),
            rw_grant("w2", 2, "write", 1.0, 9.0), op(1.5, "w2", "release", 2),
            op(2.0, "w1", "release", 1), *rest,
        )  # fmt: skip

    log = rw_log()
    [finding] = check_writer_beside_reader(run(9.0), log)  # the lock granted a writer beside
    assert finding.gated and "w2 held the write lock (token 2)" in finding.message
    assert "w1 held the read lock (token 1)" in finding.message
    assert check_writer_beside_reader(run(0.5), log) == []  # w1 may not act past 0.5
    # Lease clocks skewed on purpose: a deadline may fall after the store's expiry.
    skewed = run(9.0, op(0.0, NEMESIS, "clock", target="all workers", rate=0.5))
    [diagnostic] = check_writer_beside_reader(skewed, log)
    assert not diagnostic.gated


def test_rwlock_writes_are_checked_like_a_counter() -> None:
    runs = paused_reader(second_read=None)
    log = rw_log(("w2", 3, 0, 1.2), ("w1", 2, 0, 2.0), final=1)  # a stale writer's write too
    counts = violations(check_all(runs, log))
    assert counts["lost-update"] == 2 and counts["stale-token"] == 1


# --- the state workload's cursor ------------------------------------------------------------


def read_ok(t: float, process: str, token: int, value: int) -> list[Event]:
    return [
        Event(t, process, "read", "invoke", token=token),
        Event(t + 0.01, process, "read", "ok", token=token, value=value),
    ]


def advance(t: float, process: str, token: int, old: int) -> list[Event]:
    return write_ok(t, process, token, old=old, new=old + 1)


def cursor(final: int) -> ResourceLog:
    return ResourceLog("state", [], final)


def test_a_cursor_handed_over_in_order_never_goes_back() -> None:
    runs = history(
        advance(1.0, "w0", 1, 0), advance(1.1, "w0", 1, 1),
        read_ok(2.0, "w1", 2, 2), advance(2.1, "w1", 2, 2),
    )  # fmt: skip
    assert check_cursor_regression(runs, cursor(3)) == []
    assert check_lost_updates(runs, cursor(3)) == []


def test_an_old_leaders_late_step_is_a_cursor_regression() -> None:
    runs = history(
        read_ok(0.9, "w0", 1, 0), advance(1.0, "w0", 1, 0),
        read_ok(2.0, "w1", 2, 1), advance(2.1, "w1", 2, 1), advance(2.2, "w1", 2, 2),
        advance(2.5, "w0", 1, 1),  # w0 wakes up and sets 2 after w1's 3 was acknowledged
    )  # fmt: skip
    [finding] = check_cursor_regression(runs, cursor(3))
    assert finding.check == "cursor-regression" and finding.processes == ("w0",)
    assert "set the cursor to 2" in finding.message and "advance to 3" in finding.message


def test_a_read_below_an_acknowledged_advance_is_a_cursor_regression() -> None:
    runs = history(advance(1.0, "w0", 1, 4), read_ok(2.0, "w1", 2, 3))
    assert checks(check_cursor_regression(runs, cursor(5))) == ["cursor-regression"]


def test_a_read_that_overlaps_an_advance_may_see_either_side() -> None:
    runs = history(
        [Event(1.0, "w1", "read", "invoke", token=2)],
        advance(1.1, "w0", 1, 4),
        [Event(1.3, "w1", "read", "ok", token=2, value=4)],  # began before the ack of 5
    )
    assert check_cursor_regression(runs, cursor(5)) == []


def test_a_final_cursor_below_an_acknowledged_advance_is_a_lost_update() -> None:
    runs = history(advance(1.0, "w0", 1, 6))
    assert checks(check_lost_updates(runs, cursor(6))) == ["lost-update"]
    assert check_lost_updates(runs, cursor(7)) == []
