"""tenure.celery's fire times: the same on every node, whatever moment a node asks."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

celery = pytest.importorskip("celery")
from celery.schedules import crontab, schedule  # noqa: E402

import tenure  # noqa: E402
from tenure.celery.beat import (  # noqa: E402
    CATCH_UP_LIMIT,
    LeaderScheduler,
    due_fires,
    next_fire,
    parse_slot,
    slot_key,
)

UTC = timezone.utc
APP = celery.Celery("fire_times")
T0 = datetime(2026, 12, 1, 21, 3, 17, 250000, tzinfo=UTC)


def test_an_interval_fires_on_its_multiples_since_the_epoch() -> None:
    every_10s = schedule(timedelta(seconds=10), app=APP)
    assert next_fire(every_10s, T0) == datetime(2026, 12, 1, 21, 3, 20, tzinfo=UTC)
    on_a_fire_time = datetime(2026, 12, 1, 21, 3, 20, tzinfo=UTC)
    assert next_fire(every_10s, on_a_fire_time) == on_a_fire_time + timedelta(seconds=10)


def test_a_crontab_fires_at_its_times() -> None:
    five = crontab(minute="*/5", app=APP)
    assert next_fire(five, T0) == datetime(2026, 12, 1, 21, 5, tzinfo=UTC)
    assert next_fire(five, datetime(2026, 12, 1, 21, 5, tzinfo=UTC)) == datetime(
        2026, 12, 1, 21, 10, tzinfo=UTC
    )


def test_due_fire_times_are_those_since_the_last_and_at_most_the_limit() -> None:
    every_1s = schedule(timedelta(seconds=1), app=APP)
    last = datetime(2026, 12, 1, 21, 0, 0, tzinfo=UTC)
    assert due_fires(every_1s, last, last + timedelta(seconds=3.5)) == [
        last + timedelta(seconds=s) for s in (1, 2, 3)
    ]
    assert due_fires(every_1s, last, last + timedelta(seconds=0.5)) == []
    far = last + timedelta(days=7)
    fires = due_fires(every_1s, last, far)
    assert len(fires) == CATCH_UP_LIMIT and fires[-1] == far  # the latest ones


def test_slot_keys_sort_as_time_and_read_back() -> None:
    times = [T0, T0 + timedelta(milliseconds=1), T0 + timedelta(hours=30)]
    keys = [slot_key(t) for t in times]
    assert keys == sorted(keys) and len({len(k) for k in keys}) == 1
    assert [parse_slot(k) for k in keys] == times
    assert parse_slot("not a time") is None


def test_a_bad_catch_up_policy_is_one_clear_error() -> None:
    app = celery.Celery("bad_policy")
    app.conf.tenure_beat_catch_up = "sometimes"
    with pytest.raises(tenure.InvalidArgument, match="catch-up policy must be one of"):
        LeaderScheduler(app)


@pytest.mark.parametrize(
    ("setting", "value", "says"),
    [("tenure_beat_ttl", "ten", "number of seconds"), ("tenure_beat_ttl", 0.001, "ttl")],
)
def test_bad_beat_settings_are_one_clear_error(setting: str, value: object, says: str) -> None:
    app = celery.Celery("bad_settings")
    app.conf[setting] = value
    with pytest.raises(tenure.InvalidArgument, match=says):
        LeaderScheduler(app)


def test_a_store_error_half_way_loses_no_fire_time(
    sqlite_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim that fails (the store unreachable for a moment) leaves its fire time due: the
    next tick sends it. In-process, with Celery's in-memory broker."""
    import time

    app = celery.Celery("store_error", broker="memory://")
    app.conf.beat_schedule = {"tick": {"task": "store_error.tick", "schedule": 0.5}}
    app.conf.tenure_store = sqlite_store_url
    app.conf.tenure_beat_ttl = 2.0
    scheduler = LeaderScheduler(app)
    client = scheduler.client
    scheduler.tick()  # leads; nothing due yet
    once = client.once
    failed: list[str] = []

    def flaky(job: str, slot: str, *args: object, **kwargs: object) -> tenure.Once:
        handle = once(job, slot, *args, **kwargs)  # type: ignore[arg-type]
        if not failed:
            failed.append(slot)

            def away(**_: object) -> tenure.Claim:
                raise tenure.StoreUnavailable("the store is away for a moment")

            monkeypatch.setattr(handle, "acquire", away)
        return handle

    monkeypatch.setattr(client, "once", flaky)
    time.sleep(0.6)
    assert scheduler.tick() > 0  # the claim failed: try again soon
    time.sleep(0.1)
    scheduler.tick()
    done = {s.slot for s in client.history("celery-beat:store_error/tick") if s.state == "done"}
    assert failed and failed[0] in done
    scheduler.close()
