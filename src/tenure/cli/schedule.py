"""Schedules for ``tenure cron``: when each slot of a job is due, and the slot's key.

Two forms, both in UTC so that servers in different time zones agree:

- a cron expression (five fields, ``0 2 * * *``; parsed by cronsim), and
- an interval, ``every 30s`` / ``every 5m`` / ``every 2h``: slots at whole multiples of the
  interval since the Unix epoch, so every server computes the same ones.

A slot's key is its due time, ``2026-12-01T02:00:00Z``: a server whose clock is a few seconds off
still names the slot it runs the same as the others do (it only runs it a little early or late).
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from typing import Protocol

from tenure import InvalidArgument

_INTERVAL = re.compile(r"(?:@?every\s+)(\d+(?:\.\d+)?)\s*(ms|s|m|h)", re.IGNORECASE)
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class Schedule(Protocol):
    text: str

    def next_after(self, t: float) -> float:
        """The first slot due strictly after ``t`` (seconds since the epoch)."""

    def latest_at_or_before(self, t: float) -> float:
        """The last slot due at or before ``t``."""


class Every:
    def __init__(self, text: str, seconds: float) -> None:
        if not math.isfinite(seconds) or seconds < 0.1:
            raise InvalidArgument(f"schedule {text!r}: the interval must be at least 100ms")
        self.text = text
        self.seconds = seconds

    def next_after(self, t: float) -> float:
        return (math.floor(t / self.seconds) + 1) * self.seconds

    def latest_at_or_before(self, t: float) -> float:
        return math.floor(t / self.seconds) * self.seconds


class Cron:
    def __init__(self, text: str) -> None:
        from cronsim import CronSim, CronSimError

        try:
            CronSim(text, datetime.now(timezone.utc))
        except CronSimError as exc:
            raise InvalidArgument(f"schedule {text!r}: {exc}") from None
        self.text = text
        self._sim = CronSim

    def next_after(self, t: float) -> float:
        start = datetime.fromtimestamp(t, timezone.utc)
        return next(self._sim(self.text, start)).timestamp()

    def latest_at_or_before(self, t: float) -> float:
        start = datetime.fromtimestamp(math.floor(t) + 1, timezone.utc)
        return next(self._sim(self.text, start, reverse=True)).timestamp()


def parse_schedule(text: str) -> Schedule:
    """``every 30s`` (or ``@every 30s``; units ms, s, m, h) or a five-field cron expression."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument("schedule must not be empty: a cron expression or 'every 30s'")
    match = _INTERVAL.fullmatch(text.strip())
    if match:
        return Every(text, float(match.group(1)) * _UNITS[match.group(2).lower()])
    if text.strip().lower().startswith(("every", "@every")):
        raise InvalidArgument(f"schedule {text!r}: use 'every N' with a unit: ms, s, m or h")
    return Cron(text.strip())


def slot_key(due: float) -> str:
    """``2026-12-01T02:00:00Z`` (milliseconds shown only when the slot has them)."""
    moment = datetime.fromtimestamp(round(due, 3), timezone.utc)
    if moment.microsecond:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def due_of(key: str) -> float:
    """The due time a `slot_key` names."""
    text = key[:-1] + "+00:00" if key.endswith("Z") else key
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise InvalidArgument(f"not a slot key made by tenure cron: {key!r}") from None


__all__ = ["Schedule", "due_of", "parse_schedule", "slot_key"]
