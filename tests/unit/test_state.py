"""Lease timing against an injected clock: the pure state machine of tenure._state."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tenure import InvalidArgument
from tenure._state import LeaseState, Timing

ttls = st.floats(min_value=0.5, max_value=3600)
drifts = st.floats(min_value=0, max_value=0.1)
margins = st.floats(min_value=0, max_value=0.1)
# A history of events: (delay before it, kind); kinds: renewal sent+confirmed after a latency.
events = st.lists(
    st.tuples(st.floats(min_value=0, max_value=2), st.floats(min_value=0, max_value=2)),
    max_size=30,
)


@given(ttls, drifts, margins, st.floats(min_value=0, max_value=1e6))
def test_deadline_is_conservative(ttl: float, drift: float, margin: float, t0: float) -> None:
    timing = Timing(ttl, drift, margin)
    state = LeaseState(timing, t0)
    assert state.deadline == pytest.approx(t0 + ttl * (1 - drift) - margin)
    assert state.deadline <= t0 + ttl  # never after the store's own expiry
    assert state.next_renewal() == pytest.approx(t0 + ttl / 3)
    assert state.next_renewal() < state.deadline


@given(ttls, events)
def test_never_valid_past_deadline_and_loss_is_final(
    ttl: float, history: list[tuple[float, float]]
) -> None:
    """Whatever renewals arrive, valid(now) implies now < deadline, and lost stays lost."""
    timing = Timing(ttl)
    now = 0.0
    state = LeaseState(timing, now)
    was_lost = False
    for delay, latency in history:
        now += delay * ttl  # the next renewal is sent after some delay
        t_sent = now
        now += latency * ttl  # and its answer comes back after some latency
        state.expire(now)
        state.confirm(t_sent, now)
        if state.valid(now):
            assert now < state.deadline
            assert not was_lost, "a lost lease came back"
            # a confirmation extends the deadline only from when its request was sent
            assert state.deadline <= max(t_sent, 0.0) + timing.valid_for + 1e-9
        else:
            was_lost = was_lost or state.lost
        if was_lost:
            assert state.lost and not state.valid(now)


@given(ttls, st.integers(min_value=1, max_value=50))
def test_renewals_keep_it_valid(ttl: float, rounds: int) -> None:
    """Renewing every ttl/3 with prompt answers keeps the lease valid indefinitely."""
    timing = Timing(ttl)
    state = LeaseState(timing, 0.0)
    for _ in range(rounds):
        now = state.next_renewal()
        assert state.valid(now)
        assert state.confirm(now, now + 0.001)
    assert not state.lost


def test_late_confirmation_does_not_revive() -> None:
    timing = Timing(3.0, 0.0, 0.0)
    state = LeaseState(timing, 0.0)
    assert state.valid(2.999)
    assert not state.valid(3.0)
    # The renewal was sent in time but answered after the deadline: too late, lost for good.
    assert not state.confirm(2.5, 3.1)
    assert state.lost
    assert not state.confirm(3.2, 3.3)
    assert not state.valid(3.3)


def test_older_confirmation_does_not_move_deadline_back() -> None:
    state = LeaseState(Timing(3.0, 0.0, 0.0), 0.0)
    state.confirm(2.0, 2.1)
    assert state.deadline == 5.0
    state.confirm(1.0, 2.2)  # an answer to an older request arriving late
    assert state.deadline == 5.0


@given(st.integers(min_value=1, max_value=100), st.floats(min_value=0, max_value=10))
def test_retry_delay_never_passes_deadline(attempt: int, now: float) -> None:
    state = LeaseState(Timing(6.0), 0.0)
    delay = state.retry_delay(attempt, now)
    assert delay >= 0
    assert now + delay <= max(now, state.deadline) + 1e-9


@pytest.mark.parametrize(
    ("ttl", "message"),
    [
        (0, "ttl must be in"),
        (-1, "ttl must be in"),
        (math.nan, "finite"),
        (math.inf, "finite"),
        (1e12, "ttl must be in"),
        ("30", "number"),
        (True, "number"),
        (0.1, "too short"),
    ],
)
def test_bad_ttl(ttl: object, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        Timing(ttl)  # type: ignore[arg-type]


def test_bad_drift_and_margin() -> None:
    with pytest.raises(InvalidArgument):
        Timing(30, drift=0.7)
    with pytest.raises(InvalidArgument):
        Timing(30, margin=-1)
