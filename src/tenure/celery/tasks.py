"""A Celery task that runs once per key at a time: ``@app.task(base=ExclusiveTask, lock_key=…)``.

Each call holds the tenure lock ``celery:<task name>:<key>`` while it runs. The lease renews
while the worker lives; a worker that is killed stops renewing, so its lock ends with the lease
(after ``lock_ttl``, plus the store's lock-delay): it cannot outlive the worker, unlike a Redis
key with a guessed timeout. A call that finds the key held elsewhere is skipped (``on_busy =
"skip"``: the task ends in the custom state ``SKIPPED``, with who held it in its meta) or retried
later (``on_busy = "retry"``, after ``busy_retry_delay`` seconds, ``max_retries`` as Celery's).

Sync code cannot be interrupted: a lease lost while the task runs (the store unreachable past the
TTL) fails the task when it returns (``LeaseLost``). Fence the writes with ``current_lease().token``
or call ``current_lease().check()`` before each one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Literal

import celery
from celery.exceptions import Ignore

import tenure
from tenure import InvalidArgument

from ._connection import client_for

logger = logging.getLogger("tenure.celery.tasks")
SKIPPED = "SKIPPED"
"""The state of a call skipped because its key was held elsewhere."""
_current: ContextVar[tenure.Lease | None] = ContextVar("tenure_celery_lease", default=None)


def current_lease() -> tenure.Lease:
    """The lease of the `ExclusiveTask` call running in this context (its token, its checks)."""
    lease = _current.get()
    if lease is None:
        raise InvalidArgument("current_lease(): no ExclusiveTask call is running here")
    return lease


class ExclusiveTask(celery.Task):  # type: ignore[misc]
    """A task base: one call per key at a time across every worker. Set as task options:

    - ``lock_key``: a ``str.format`` template over the call's arguments (``"{0}"``,
      ``"{account}"``), or a function of them giving the key; default: the task name alone;
    - ``lock_scope``: whose keys these are (default: the task's name); tasks with one scope
      share their keys, so one call of any of them runs per key;
    - ``lock_ttl``: the lease's TTL in seconds (default 30);
    - ``on_busy``: ``"skip"`` (default) or ``"retry"``; ``busy_retry_delay`` (default 5 s).
    """

    lock_key: str | Callable[..., str] | None = None
    lock_scope: str | None = None
    lock_ttl: float = 30.0
    on_busy: Literal["skip", "retry"] = "skip"
    busy_retry_delay: float = 5.0

    def lock_name(self, *args: Any, **kwargs: Any) -> str:
        scope = self.lock_scope or self.name
        if self.lock_key is None:
            return f"celery:{scope}"
        try:
            key = (
                self.lock_key.format(*args, **kwargs)
                if isinstance(self.lock_key, str)
                else self.lock_key(*args, **kwargs)
            )
        except (IndexError, KeyError, TypeError, ValueError) as exc:
            raise InvalidArgument(
                f"{self.name}: lock_key {self.lock_key!r} does not fit the call's arguments: {exc}"
            ) from None
        return f"celery:{scope}:{key}"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name = self.lock_name(*args, **kwargs)
        run = super().__call__

        def body(lease: tenure.Lease | None = None) -> Any:  # given by exclusive
            reset = _current.set(lease)
            try:
                return run(*args, **kwargs)
            finally:
                _current.reset(reset)

        client = client_for(self.app)
        result = client.lock(name, self.lock_ttl, wait=False)(body)()
        if isinstance(result, tenure.Skipped):
            return self.busy(result)
        return result

    def busy(self, skipped: tenure.Skipped) -> Any:
        holder = skipped.lock.holder if skipped.lock is not None else None
        who = f"{holder.label or holder.host} pid {holder.pid}" if holder is not None else ""
        if self.on_busy == "retry":
            logger.info(
                "%s: held by %s; retrying in %s s", skipped.name, who, self.busy_retry_delay
            )
            raise self.retry(countdown=self.busy_retry_delay)
        logger.info("%s: not run, held by %s", skipped.name, who)
        if self.request.called_directly:
            return skipped
        self.update_state(state=SKIPPED, meta={"lock": skipped.name, "holder": who})
        raise Ignore()
