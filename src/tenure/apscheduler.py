"""APScheduler 3.x: a job scheduled in every replica of an app runs once per fire time across them.

::

    guard = OncePerFireTime(tenure.connect(), ttl=60)
    scheduler = BackgroundScheduler(executors={"default": guard}, timezone="UTC")

`OncePerFireTime` is an executor wrapping another (a thread pool by default). For each fire time
the scheduler submits, it claims the slot ``<fire time in UTC, ISO-8601>`` of the tenure job
``apscheduler:<job id>`` (``client.claim``) and hands on only the fire times claimed here. The
scheduler's own events record each end: executed → ``done``, error or missed → ``failed``. Every
fire time is then in ``tenure history apscheduler:<job id>``. docs/apscheduler.md says what
happens on fail-over, on clock skew and with a job longer than its TTL.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from tenure import DEFAULT_TTL, Claim, Client, InvalidArgument
from tenure.checks import Policy, check_arguments, check_policy, one_line

try:
    from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, EVENT_JOB_MISSED
    from apscheduler.executors.base import BaseExecutor, MaxInstancesReachedError
    from apscheduler.executors.pool import ThreadPoolExecutor
except ImportError as exc:  # not installed, or APScheduler 4 (a rewrite without executors)
    raise ImportError(
        f"tenure.apscheduler needs APScheduler 3.x ({exc}): pip install 'tenure[apscheduler]'"
    ) from exc

__all__ = ["OncePerFireTime", "slot_of"]

log = logging.getLogger("tenure.apscheduler")
ENDS = EVENT_JOB_EXECUTED | EVENT_JOB_ERROR | EVENT_JOB_MISSED


def slot_of(run_time: datetime) -> str:
    """The slot key of a fire time: UTC, ISO-8601 (``2026-12-01T21:30:00+00:00``), so replicas
    in different time zones name the same fire time alike."""
    return run_time.astimezone(timezone.utc).isoformat()


class OncePerFireTime(BaseExecutor):  # type: ignore[misc]  # APScheduler has no type hints
    """An APScheduler 3 executor that runs each fire time of a job once across every scheduler
    using it on the same store, and hands the rest to ``inner`` (default: a ``ThreadPoolExecutor``).

    ``client`` is a sync `tenure.Client` (``tenure.connect()``); its store must keep records.
    ``ttl``: the lease of each claimed fire time, renewed while the job runs; how long a dead
    replica's claim stays held. ``policy``: as for ``client.claim``. ``prefix``: the tenure job
    is ``prefix + job.id``.
    """

    def __init__(
        self,
        client: Client,
        inner: Any = None,
        *,
        ttl: float = DEFAULT_TTL,
        policy: Policy = "at-least-once",
        prefix: str = "apscheduler:",
    ) -> None:
        super().__init__()
        if not isinstance(client, Client):
            raise InvalidArgument(f"client must be a sync tenure.Client, got {client!r}")
        check_arguments(prefix + "job", ttl, None)
        check_policy(policy)
        if not client.capabilities.records:
            raise InvalidArgument(f"the store at {client.url} keeps no records: it cannot run once")
        self.client = client
        self.inner = ThreadPoolExecutor() if inner is None else inner
        if not isinstance(self.inner, BaseExecutor):
            raise InvalidArgument(f"inner must be an APScheduler executor, got {self.inner!r}")
        self.ttl = ttl
        self.policy: Policy = policy
        self.prefix = prefix
        self._mutex = threading.Lock()
        # job id -> one dict (slot -> run, not ended yet) per submission in flight, oldest first.
        self._batches: dict[str, list[dict[str, Claim]]] = {}
        self._listening: object = None
        self._warned: set[str] = set()
        self._hook_run_job_error()

    def __repr__(self) -> str:
        return f"<OncePerFireTime {self.prefix}* on {self.client.url} around {self.inner!r}>"

    # -- the executor interface -----------------------------------------------------------

    def start(self, scheduler: Any, alias: str) -> None:
        super().start(scheduler, alias)
        self.inner.start(scheduler, alias)
        if self._listening is not scheduler:  # once, also when a scheduler is started again
            scheduler.add_listener(self._on_event, ENDS)
            self._listening = scheduler

    def shutdown(self, wait: bool = True) -> None:
        # Jobs still running end through their events as usual; with wait=False, a claim whose
        # job outlives the process is released when the client closes, unrecorded.
        self.inner.shutdown(wait)

    def submit_job(self, job: Any, run_times: Sequence[datetime]) -> None:
        with self._mutex:
            in_flight = len(self._batches.get(job.id, ()))
        if in_flight >= job.max_instances:
            # Refused before claiming, so that a replica with room claims this fire time. (The
            # inner executor's own count is private; ours is never lower than it.)
            raise MaxInstancesReachedError(job)
        self._warn_if_unmatched(job, run_times)
        name = self.prefix + job.id
        batch: dict[str, Claim] = {}
        claimed: list[datetime] = []
        try:
            for run_time in run_times:
                slot = slot_of(run_time)
                run = self.client.once(name, slot, self.ttl, policy=self.policy).acquire()
                if run:
                    batch[slot] = run
                    claimed.append(run_time)
                else:
                    _log_skipped(name, slot, run)
            if not claimed:
                return
            with self._mutex:  # before submitting: its events may come before submit returns
                self._batches.setdefault(job.id, []).append(batch)
            self.inner.submit_job(job, claimed)
        except BaseException:
            self._forget(job.id, batch)
            for slot, run in batch.items():  # not started: let them go unrecorded
                with contextlib.suppress(Exception):
                    run.abandon()
                log.warning("tenure: %s %s: claimed but not submitted, abandoned", name, slot)
            raise

    def _do_submit_job(self, job: Any, run_times: Sequence[datetime]) -> None:
        raise AssertionError("submit_job hands jobs to the inner executor")  # abstract in base

    # -- for the jobs ---------------------------------------------------------------------

    def runs(self, job_id: str) -> list[Claim]:
        """The runs claimed here for APScheduler job ``job_id`` whose end is not recorded yet,
        oldest fire time first. Inside the job (with the default ``coalesce=True`` and
        ``max_instances=1``, exactly one): ``run.token`` to fence writes, ``run.record.slot`` for
        the fire time, ``run.lease.check()`` before a write that cannot be taken back."""
        with self._mutex:
            return [run for batch in self._batches.get(job_id, ()) for run in batch.values()]

    # -- ends -----------------------------------------------------------------------------

    def _on_event(self, event: Any) -> None:
        """A listener for the scheduler's job events: record the end of a fire time run here."""
        slot = slot_of(event.scheduled_run_time)
        run = self._take(event.job_id, slot)
        if run is None:  # not claimed here: another executor's job, or not run here
            return
        if event.code == EVENT_JOB_EXECUTED:
            self._end(run, None)
        elif event.code == EVENT_JOB_ERROR:
            self._end(run, one_line(event.exception) if event.exception else "job raised")
        else:  # EVENT_JOB_MISSED: claimed, then not started within misfire_grace_time
            late = (datetime.now(timezone.utc) - event.scheduled_run_time).total_seconds()
            self._end(run, f"missed: not started {late:.1f}s after its fire time")

    def _end(self, run: Claim, error: str | None) -> None:
        try:
            run.complete(error=error)
        except Exception as exc:  # LeaseLost (nothing recorded), StaleToken, the store down
            log.warning("tenure: %r: its end was not recorded: %s", run, one_line(exc))

    def _take(self, job_id: str, slot: str) -> Claim | None:
        with self._mutex:
            batches = self._batches.get(job_id, [])
            for batch in batches:
                run = batch.pop(slot, None)
                if run is not None:
                    if not batch:
                        self._forget_locked(job_id, batch)
                    return run
        return None

    def _forget(self, job_id: str, batch: dict[str, Claim]) -> None:
        with self._mutex:
            self._forget_locked(job_id, batch)

    def _forget_locked(self, job_id: str, batch: dict[str, Claim]) -> None:
        batches = self._batches.get(job_id, [])
        for i, other in enumerate(batches):
            if other is batch:
                del batches[i]
                break
        if not batches:
            self._batches.pop(job_id, None)

    def _hook_run_job_error(self) -> None:
        """When the inner executor could not run a job at all (a broken process pool, a job
        that cannot be pickled), APScheduler 3 dispatches no event: it calls the executor's
        undocumented ``_run_job_error(job_id, exc, traceback)``. That is the only sign, so wrap
        it: otherwise those claims would stay held (and renewed) until the process exits."""
        original = getattr(self.inner, "_run_job_error", None)
        if not callable(original):
            return

        def run_job_error(job_id: str, exc: BaseException, traceback: Any = None) -> None:
            try:
                original(job_id, exc, traceback)
            finally:
                # One call per failed submission, which does not say which: take the oldest
                # (exact with max_instances=1, the default).
                with self._mutex:
                    batches = self._batches.get(job_id, [])
                    batch = batches[0] if batches else {}
                    self._forget_locked(job_id, batch)
                for run in batch.values():
                    self._end(run, f"not run by the executor: {one_line(exc)}")

        self.inner._run_job_error = run_job_error

    def _warn_if_unmatched(self, job: Any, run_times: Sequence[datetime]) -> None:
        """Replicas agree on a fire time only if their triggers compute the same one. A fire
        time between whole seconds almost always comes from an interval trigger anchored at its
        scheduler's start (no ``start_date``) or from jitter: each replica has its own."""
        if job.id in self._warned or not any(t.microsecond for t in run_times):
            return
        self._warned.add(job.id)
        log.warning(
            "tenure: job %r fires at %s, between whole seconds: replicas started at other"
            " moments name other fire times, and each runs its own. Give its interval trigger"
            " an explicit start_date (without jitter), or use a cron trigger",
            job.id,
            slot_of(run_times[0]),
        )


def _log_skipped(name: str, slot: str, run: Claim) -> None:
    """Say at info level why a fire time is not run here, and by whom it was."""
    record = run.record
    if record is None:
        log.info("tenure: %s %s: not run here, it is being claimed elsewhere", name, slot)
        return
    who = record.server + (f" ({record.label})" if record.label else "")
    if run.state == "running":
        log.info("tenure: %s %s: not run here, running on %s", name, slot, who)
    else:
        log.info("tenure: %s %s: not run here, %s by %s", name, slot, run.state, who)
