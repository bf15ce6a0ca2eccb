"""The stop-by rule (tenure.cli.stopby) and the timing it rests on, against an injected clock."""

from __future__ import annotations

import signal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tenure import InvalidArgument, Loss
from tenure._state import LeaseState, Timing, default_lock_delay
from tenure.cli.stopby import PAUSE_GAP, Cause, StopBy

ttls = st.floats(min_value=0.5, max_value=3600)


@given(ttls, st.floats(min_value=0, max_value=1))
def test_default_grace_leaves_a_renewal_period_before_sigterm(ttl: float, fraction: float) -> None:
    timing = Timing(ttl)
    state = LeaseState(timing, 0.0)
    term_at = state.deadline - timing.max_grace
    assert term_at >= timing.renew_every * 2 - 0.01  # every retry of the due renewal fits
    assert timing.check_grace(None) == timing.max_grace
    assert timing.check_grace(timing.max_grace * fraction) == timing.max_grace * fraction


def test_too_much_grace_is_refused_naming_the_largest() -> None:
    assert Timing(30).max_grace == 9.6
    with pytest.raises(InvalidArgument, match=r"with ttl 3s the largest grace is 0\.87s"):
        Timing(3).check_grace(8)
    with pytest.raises(InvalidArgument, match=">= 0"):
        Timing(3).check_grace(-1)


def test_default_lock_delay_is_one_ttl_at_most_15s() -> None:
    assert default_lock_delay(3) == 3 and default_lock_delay(30) == 15
    assert Timing(3).lock_delay == 3 and Timing(3, lock_delay=0).lock_delay == 0
    assert Timing(30).lock_delay == 15 and Timing(30, lock_delay=20).lock_delay == 20


def test_at_risk_after_two_thirds_until_a_renewal_is_confirmed() -> None:
    state = LeaseState(Timing(3), 0.0)
    assert not state.at_risk(1.99) and state.at_risk(2.0)
    state.confirm(1.0, 2.5)  # the renewal sent at 1.0 is confirmed late, at 2.5
    assert not state.at_risk(2.9) and state.at_risk(3.0)


def run(plan: StopBy, steps: list[tuple[float, float, Loss | None]]) -> list[object]:
    return [plan.step(now, deadline, loss) for now, deadline, loss in steps]


def test_term_at_deadline_minus_grace_then_kill_at_the_deadline() -> None:
    plan = StopBy(grace=1.0, now=0.0)
    assert run(plan, [(0.0, 5.0, None), (plan.wake_at(5.0, None), 5.0, None)]) == [
        None,
        signal.SIGTERM,
    ]
    assert plan.wake_at(5.0, None) == 5.0
    assert run(plan, [(4.5, 5.0, None), (5.0, 5.0, Loss.DEADLINE)]) == [None, signal.SIGKILL]
    assert plan.cause is Cause.RENEWALS and plan.killed
    assert plan.step(6.0, 5.0, Loss.DEADLINE) is None  # sent once


def test_a_renewal_after_sigterm_does_not_unsend_it_but_moves_the_kill() -> None:
    plan = StopBy(grace=1.0, now=0.0)
    assert run(plan, [(4.0, 5.0, None), (5.0, 8.0, None)]) == [signal.SIGTERM, None]
    assert plan.terminated and not plan.killed and plan.wake_at(8.0, None) == 8.0


def test_the_store_saying_gone_kills_at_once() -> None:
    plan = StopBy(grace=1.0, now=0.0)
    assert run(plan, [(1.0, 5.0, Loss.GONE)]) == [signal.SIGKILL]
    assert plan.cause is Cause.GONE and not plan.terminated


def test_a_revoked_grant_kills_at_once() -> None:
    plan = StopBy(grace=1.0, now=0.0)
    assert run(plan, [(1.0, 5.0, Loss.REVOKED)]) == [signal.SIGKILL]
    assert plan.cause is Cause.REVOKED and not plan.terminated


def test_waking_late_past_the_deadline_is_a_pause_and_kills_at_once() -> None:
    plan = StopBy(grace=1.0, now=0.0)
    assert plan.step(0.0, 5.0, None) is None  # next planned at 4.0
    assert plan.step(4.0 + PAUSE_GAP + 2, 5.0, Loss.DEADLINE) == signal.SIGKILL
    assert plan.cause is Cause.PAUSED and not plan.terminated


def test_a_loss_before_the_grace_starts_terminates_now() -> None:
    plan = StopBy(grace=1.0, now=0.0)
    assert plan.step(1.0, 5.0, Loss.ERROR) == signal.SIGTERM
    assert plan.step(5.0, 5.0, Loss.ERROR) == signal.SIGKILL
    assert plan.cause is Cause.RENEWALS


def test_no_grace_kills_at_the_deadline() -> None:
    plan = StopBy(grace=0.0, now=0.0)
    assert run(plan, [(0.0, 5.0, None), (5.0, 5.0, Loss.DEADLINE)]) == [None, signal.SIGKILL]
    assert plan.cause is Cause.RENEWALS
