"""Celery beat on every node, one ticking: ``celery -A proj beat -S tenure.celery.LeaderScheduler``.

Every beat process campaigns in one election (``app.conf.tenure_beat_election``); the leader
sends the due tasks, the others wait to take over. Each fire time of each entry is a slot of a
tenure once-job (``<election>/<entry name>``, slot: the fire time in UTC), claimed before the
task is sent and recorded done after it. So the schedule's last-run state lives in the store,
not in a file on one node, and a new leader knows which fire times were sent:

- a claim that finds the slot done skips it: a fire time is sent once across leaders;
- a fire time that passed while nobody led is sent by the next leader per the entry's catch-up
  policy (``all``, the default; ``latest``, Celery's own after a restart; ``skip``);
- a leader that was paused (or cut off) past its term checks its leadership and the slot's lease
  by their deadlines before it hands a task to the broker, and its late record is refused by the
  slot's version: a stale former leader's tick is not sent.

The one window left: a leader killed after the broker took the task and before the store
recorded it leaves the slot "running", and the next leader sends it again (at-least-once; the
slot's history then shows attempt 2). Messages carry ``tenure_slot`` and ``tenure_term`` headers.
"""

from __future__ import annotations

import logging
import math
import os
import socket
from collections import deque
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal, get_args

import celery.beat
import celery.schedules

import tenure
from tenure import InvalidArgument, LeaseLost, NotAcquired, TenureError
from tenure.checks import check_arguments, check_name

from ._connection import client_for, store_url

logger = logging.getLogger("tenure.celery.beat")

CatchUp = Literal["all", "latest", "skip"]
CATCH_UP_OPTION = "tenure_catch_up"
"""An entry's ``options`` key for its own catch-up policy (taken out before the task is sent)."""
CATCH_UP_LIMIT = 100
"""At most this many missed fire times of one entry are sent on a take-over (the latest)."""
FOLLOWER_WAIT = 5.0
"""Seconds a follower campaigns in one tick: beat's loop must come back to see a shutdown."""
RETRY = 0.5
"""Seconds before a leader looks again at a fire time it could not send: claimed by a former
leader whose slot lease has not ended yet, or refused by the broker."""
CLAIM_TTL = 2.0
"""The lease of a slot's claim, which spans one send (renewed if the broker is slow): a leader
that dies holding one holds that fire time back for this, plus its lock-delay (as long)."""
UTC = timezone.utc


@dataclass(frozen=True)
class BeatSettings:
    """What the app's configuration says (``tenure_beat_*``), checked once."""

    election: str
    ttl: float
    catch_up: CatchUp

    @classmethod
    def of(cls, app: Any) -> BeatSettings:
        conf = app.conf
        election = str(conf.get("tenure_beat_election") or f"celery-beat:{app.main or 'celery'}")
        ttl = conf.get("tenure_beat_ttl") or 10.0
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
            raise InvalidArgument(f"tenure_beat_ttl must be a number of seconds, got {ttl!r}")
        check_arguments(election, float(ttl), None)  # the election's name and the TTL
        return cls(election, float(ttl), check_catch_up(conf.get("tenure_beat_catch_up") or "all"))

    def job(self, entry: str) -> str:
        return f"{self.election}/{entry}"


def check_catch_up(policy: object) -> CatchUp:
    if policy not in get_args(CatchUp):
        raise InvalidArgument(
            f"catch-up policy must be one of {', '.join(get_args(CatchUp))}, got {policy!r}"
        )
    return policy  # type: ignore[return-value]


# -- fire times: the same on every node ---------------------------------------------------------


def slot_key(fire: datetime) -> str:
    """``2026-12-01T21:30:00.000+00:00``: one length, so key order is time order."""
    return fire.astimezone(UTC).isoformat(timespec="milliseconds")


def parse_slot(key: str) -> datetime | None:
    try:
        return datetime.fromisoformat(key).astimezone(UTC)
    except ValueError:
        return None


def next_fire(schedule: Any, after: datetime) -> datetime | None:
    """The first fire time of ``schedule`` after ``after``, or None for a kind of schedule
    without fixed fire times. An interval fires on its multiples since the epoch (10 s: :00,
    :10, …), not one interval after beat started (Celery's own): every node must agree."""
    if isinstance(schedule, celery.schedules.crontab):
        start, delta, _now = schedule.remaining_delta(after)
        fire: datetime = (start + delta).astimezone(UTC)
        return fire
    if type(schedule) is celery.schedules.schedule:
        period = round(schedule.run_every.total_seconds() * 1000)
        if period <= 0:
            raise InvalidArgument(f"an interval must be positive, got {schedule.run_every}")
        millis = math.floor(after.timestamp() * 1000)
        return datetime.fromtimestamp((millis // period + 1) * period / 1000, UTC)
    return None


def due_fires(schedule: Any, last: datetime, now: datetime) -> list[datetime]:
    """The fire times after ``last`` and not after ``now`` (the latest ``CATCH_UP_LIMIT``). A
    schedule without fixed fire times (solar, custom) is asked Celery's way: due now or not."""
    if next_fire(schedule, last) is None:
        return [now] if schedule.is_due(last)[0] else []
    if type(schedule) is celery.schedules.schedule:  # no walk through a long outage
        last = max(last, now - CATCH_UP_LIMIT * schedule.run_every)
    fires: deque[datetime] = deque(maxlen=CATCH_UP_LIMIT)
    fire = next_fire(schedule, last)
    while fire is not None and fire <= now:
        fires.append(fire)
        fire = next_fire(schedule, fire)
    return list(fires)


def seconds_until_due(schedule: Any, last: datetime, now: datetime) -> float:
    fire = next_fire(schedule, last)
    if fire is None:
        return float(schedule.is_due(last)[1])
    return max(0.0, (fire - now).total_seconds())


# -- the scheduler ------------------------------------------------------------------------------


class LeaderScheduler(celery.beat.Scheduler):  # type: ignore[misc]
    """A beat scheduler to run on every node: only the leader of the app's election sends."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._settings: BeatSettings | None = None
        self._leadership: tenure.Leadership | None = None
        self._last: dict[str, datetime] = {}
        """Per entry: the latest fire time handled (sent, or passed over by the policy)."""
        self._pending: dict[str, list[datetime]] = {}
        """Per entry: due fire times not sent yet, oldest first."""
        super().__init__(*args, **kwargs)

    @property
    def settings(self) -> BeatSettings:
        if self._settings is None:
            self._settings = BeatSettings.of(self.app)
        return self._settings

    @property
    def client(self) -> tenure.Client:
        return client_for(self.app, "elections", "records")

    def setup_schedule(self) -> None:
        super().setup_schedule()
        settings = self.settings  # a bad setting, name or policy stops beat at its start
        for entry in self.schedule.values():
            check_name(settings.job(entry.name))
            self.catch_up_of(entry)
        self.client  # noqa: B018 - and so does a store without elections or records

    def catch_up_of(self, entry: Any) -> CatchUp:
        return check_catch_up(entry.options.get(CATCH_UP_OPTION, self.settings.catch_up))

    @property
    def info(self) -> str:
        where = store_url(self.app) or os.environ.get("TENURE_STORE") or "the embedded store"
        return f"    . tenure -> {where} (election {self.settings.election})"

    # Celery's loop: ``interval = scheduler.tick(); sleep(interval)`` until shutdown.
    def tick(self, *args: Any, **kwargs: Any) -> float:
        try:
            leadership = self.lead()
            if leadership is None:
                return 0.0  # the campaign waited already
            return self.send_due(leadership)
        except LeaseLost:
            return 0.0  # the next tick sees the leadership lost and campaigns
        except TenureError as exc:
            logger.warning("beat: %s; trying again in %.0f s", exc, RETRY)
            return RETRY

    def lead(self) -> tenure.Leadership | None:
        """The leadership, while it lasts; else campaign for up to ``FOLLOWER_WAIT``."""
        if self._leadership is not None:
            if not self._leadership.lost:
                return self._leadership
            logger.warning(
                "beat: lost the lead of %s (term %d): %s",
                self.settings.election,
                self._leadership.term,
                self._leadership.lost_reason,
            )
            self._leadership = None
        value = f"{socket.gethostname()} pid {os.getpid()}"
        try:
            # No lock-delay on the term: what a paused former leader could still be sending is
            # a slot it claimed, and the slot's own lock holds that back. So a fail-over takes
            # one TTL, not two.
            election = self.client.election(
                self.settings.election, self.settings.ttl, value=value, lock_delay=0
            )
            leadership = election.acquire(timeout=FOLLOWER_WAIT)
        except NotAcquired:
            return None
        logger.info("beat: leading %s, term %d", self.settings.election, leadership.term)
        self._leadership = leadership
        self._last.clear()
        self._pending.clear()
        return leadership

    def take_over(self, entry: Any, now: datetime) -> None:
        """What a new leader owes ``entry``: the fire times since the last one the store says
        was sent (or failed), per the entry's catch-up policy; none if it never ran."""
        ended = [
            fire
            for slot in self.client.history(self.settings.job(entry.name))
            if slot.state in ("done", "failed") and (fire := parse_slot(slot.slot)) is not None
        ]
        if not ended:
            self._last[entry.name], self._pending[entry.name] = now, []
            return
        missed = due_fires(entry.schedule, max(ended), now)
        policy = self.catch_up_of(entry)
        owed = missed if policy == "all" else missed[-1:] if policy == "latest" else []
        self._last[entry.name] = missed[-1] if missed else max(ended)
        self._pending[entry.name] = owed
        if len(owed) < len(missed):
            logger.info(
                "beat: %s: %d fire time(s) passed while nobody led; catch-up %s sends %d",
                entry.name,
                len(missed),
                policy,
                len(owed),
            )

    def send_due(self, leadership: tenure.Leadership) -> float:
        """Send every due fire time, oldest first; the seconds until the next one."""
        now = datetime.now(UTC)
        wait = float(self.max_interval)
        for entry in list(self.schedule.values()):
            if entry.name not in self._last:
                self.take_over(entry, now)
            fires = due_fires(entry.schedule, self._last[entry.name], now)
            if fires:
                self._last[entry.name] = fires[-1]
            # Due fire times go into pending before any is sent, and leave it only once sent:
            # a store or broker error half-way (it propagates to tick) loses none of them. One
            # not sent now (claimed by a dead leader, the broker down) waits for the next look;
            # the later ones go on meanwhile.
            pending = self._pending[entry.name]
            pending.extend(fires)
            for fire in list(pending):
                if self.send(entry, fire, leadership):
                    pending.remove(fire)
                else:
                    wait = RETRY
            wait = min(wait, seconds_until_due(entry.schedule, self._last[entry.name], now))
        return wait

    def send(self, entry: Any, fire: datetime, leadership: tenure.Leadership) -> bool:
        """Claim the fire time's slot and send its task: true if it is sent (here or before)."""
        slot = slot_key(fire)
        run = self.client.once(self.settings.job(entry.name), slot, CLAIM_TTL).acquire()
        if not run:
            # "running": a former leader claimed it and its slot lease has not ended; it may
            # still record it. Look again soon: at-least-once claims it once the lease ends.
            return bool(run.state != "running")
        assert run.lease is not None
        try:
            leadership.check()  # by its deadline: a paused leader stops here
            run.lease.check()
            self.apply_async(self.stamped(entry, slot, leadership.term), self.producer, False)
        except LeaseLost:
            with suppress(TenureError):
                run.abandon()
            raise
        except Exception as exc:  # the broker refused: the slot is sent again, soon
            logger.error("beat: could not send %s for %s: %s", entry.name, slot, exc)
            with suppress(TenureError):
                run.abandon()
            return False
        try:
            run.complete()
        except TenureError as exc:  # sent, but not recorded: let the slot's lock go
            logger.warning(
                "beat: sent %s for %s but could not record it (%s); a later leader may send it"
                " again",
                entry.name,
                slot,
                exc,
            )
            with suppress(TenureError):
                run.abandon()
        logger.info(
            "beat: sent %s (%s) for %s, term %d", entry.name, entry.task, slot, leadership.term
        )
        return True

    def stamped(self, entry: Any, slot: str, term: int) -> Any:
        """The entry as sent: its catch-up option out, the slot and term in its headers."""
        options = {k: v for k, v in entry.options.items() if k != CATCH_UP_OPTION}
        options["headers"] = {**options.get("headers", {}), "tenure_slot": slot}
        options["headers"]["tenure_term"] = term
        return self.Entry(**{**dict(entry), "options": options})

    def close(self) -> None:
        leadership, self._leadership = self._leadership, None
        if leadership is not None and not leadership.lost:
            with suppress(TenureError):
                leadership.release()
        super().close()
