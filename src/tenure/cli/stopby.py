"""When a supervised command is stopped (docs/design.md rule 5): a pure step function, no I/O.

While renewals are confirmed nothing happens. When they are not, SIGTERM at ``deadline −
grace`` and SIGKILL at the deadline, which comes before the store could grant the lock to
anyone else. SIGKILL at once, with no grace, when the store says the session is gone (or the
grant revoked: ``tenure revoke``) or when
the supervisor finds itself past the deadline after not running for a while (it was paused):
someone else may already hold the lock. A renewal confirmed after SIGTERM does not un-send it;
the deadline moves on, and SIGKILL comes only if the new deadline is reached too.
"""

from __future__ import annotations

import math
import signal
from enum import Enum

from tenure import Loss


class Cause(Enum):
    """Why a command was stopped; each has its own exit code and stderr line."""

    RENEWALS = "renewals failed"
    PAUSED = "paused past the deadline"
    GONE = "the store says the session is gone"
    REVOKED = "the store says an operator revoked it"


PAUSE_GAP = 0.5
"""Seconds the supervisor may wake late before it counts itself as having been paused."""


class StopBy:
    """The stop-by rule for one command under one lease; ``step`` says what to send now."""

    def __init__(self, grace: float, now: float) -> None:
        self.grace = grace
        self.cause: Cause | None = None
        self.terminated = False
        self.killed = False
        self._planned = now  # when the last step meant to run next

    def step(self, now: float, deadline: float, loss: Loss | None) -> signal.Signals | None:
        """The signal to send to the command's group now (None: nothing yet)."""
        late = now - self._planned
        self._planned = self.wake_at(deadline, loss)
        if self.killed:
            return None
        if loss is Loss.GONE:
            return self._kill(Cause.GONE)
        if loss is Loss.REVOKED:  # held back for it, unless revoked --now: then held already
            return self._kill(Cause.REVOKED)
        if now >= deadline:
            return self._kill(Cause.PAUSED if late > PAUSE_GAP else self.cause or Cause.RENEWALS)
        if not self.terminated and (loss is not None or now >= deadline - self.grace):
            self.terminated = True
            self.cause = Cause.RENEWALS
            return signal.SIGTERM
        return None

    def wake_at(self, deadline: float, loss: Loss | None) -> float:
        """When ``step`` has something to decide next, unless the lease changes first."""
        if self.killed:
            return math.inf
        if not self.terminated and loss is None:
            return deadline - self.grace
        return deadline

    def _kill(self, cause: Cause) -> signal.Signals:
        self.killed = True
        self.cause = cause
        return signal.SIGKILL
