"""``tenure run NAME -- CMD``: run a command while holding a lock, like flock(1) across processes.

Waiting: one stderr line per change of holder. SIGINT/SIGTERM/SIGHUP while waiting leave the
queue and exit 128+N with nothing held. Running: the command gets TENURE_TOKEN, TENURE_LOCK and
TENURE_STORE, runs in its own process group, receives the signals tenure receives, and dies if
tenure dies. It is stopped by the lease's deadline when renewals fail (SIGTERM --grace seconds
before, SIGKILL at it: exit 76), killed at once when tenure was paused past the deadline (77) or
the store says the session is gone (78); the lock is released only once its group is gone.
"""

from __future__ import annotations

import math
import os
import signal
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

import click

import tenure
from tenure import LockInfo, Timing
from tenure.checks import (
    DEFAULT_READERS,
    Grade,
    check_arguments,
    check_label,
    check_plain,
    check_readers,
    check_semaphore,
)

from . import (
    EXIT_BUSY,
    EXIT_CODES_HELP,
    EXIT_GONE,
    EXIT_LOST,
    EXIT_PAUSED,
    EXIT_SIGNAL_BASE,
    child_url,
    error,
    lease_options,
    one_line,
    open_client,
)
from .child import FORWARDED, CommandError, resolve_command, running, settle
from .metrics import textfile_option
from .stopby import Cause


class Interrupted(BaseException):
    """A signal arrived while no command was running (like KeyboardInterrupt, for any signal)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextmanager
def _signals_interrupt(signals: Sequence[int] = FORWARDED) -> Iterator[None]:
    """Turn the first of ``signals`` into `Interrupted`; ignore later ones while cleaning up."""
    fired: list[int] = []

    def interrupt(signum: int, _frame: FrameType | None) -> None:
        if not fired:
            fired.append(signum)
            raise Interrupted(signum)

    previous = {signum: signal.signal(signum, interrupt) for signum in signals}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def describe(holder: LockInfo) -> str:
    """``host pid 123 (label 'ci'), token 7, expires in 28.1s``."""
    owner = holder.holder
    label = f" (label {owner.label!r})" if owner.label else ""
    return (
        f"{owner.host} pid {owner.pid}{label}, token {holder.token}, "
        f"expires in {max(0.0, holder.expires_in):.1f}s"
    )


class WaitReporter:
    """Prints who holds the lock while we wait: one line per change of holder."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._last: tuple[object, ...] | None = None

    def __call__(self, holder: LockInfo | None) -> None:
        key = (None,) if holder is None else (holder.token, holder.holder)
        if key == self._last:
            return
        self._last = key
        if holder is None:
            what = "not held, but held back by lock-delay or others are ahead in the queue"
        else:
            what = f"held by {describe(holder)}"
        click.echo(f"tenure: waiting for lock {self.name!r}: {what}", err=True)


def _check_inputs(
    name: str,
    ttl: float,
    timeout: float | None,
    grace: float | None,
    label: str,
    lock_delay: float | None = None,
) -> float:
    """Refuse bad input before anything is opened, created or acquired; the grace to use."""
    check_arguments(name, ttl, timeout)
    check_label(label)
    if grace is not None and (not math.isfinite(grace) or grace < 0):
        raise tenure.InvalidArgument(f"grace must be a finite number >= 0 seconds, got {grace!r}")
    return Timing(ttl, lock_delay=lock_delay).check_grace(grace)


@click.command(
    epilog=EXIT_CODES_HELP,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.argument("name")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option(
    "--wait/--no-wait",
    default=True,
    show_default=True,
    help="Wait for the lock, or exit 75 at once if it is held.",
)
@click.option(
    "--timeout",
    type=float,
    default=None,
    metavar="S",
    help="Give up waiting after S seconds (exit 75). Default: wait as long as it takes.",
)
@click.option(
    "--permits",
    type=int,
    default=None,
    metavar="N",
    help="NAME is a semaphore: run while holding one of its N permits (at most N commands at"
    " once, in arrival order). TENURE_LOCK is then the permit's slot, the key of its token.",
)
@click.option(
    "--read",
    is_flag=True,
    help="NAME is a read-write lock: run while holding its read lock, beside other --read"
    " runs and never beside a --write one. TENURE_MODE is then read.",
)
@click.option(
    "--write",
    is_flag=True,
    help="NAME is a read-write lock: run while holding its write lock, alone; --read runs that"
    " come later wait for it. TENURE_MODE is then write.",
)
@textfile_option
@lease_options(
    ttl="Lease TTL in seconds; renewed every TTL/3 while the command runs.",
    label="A label shown to waiters and by 'tenure ls'.",
    quiet="Do not report the holder while waiting.",
)
def run(
    name: str,
    command: tuple[str, ...],
    ttl: float,
    wait: bool,
    timeout: float | None,
    permits: int | None,
    read: bool,
    write: bool,
    grace: float | None,
    lock_delay: float | None,
    store: str | None,
    require: Grade | None,
    label: str,
    quiet: bool,
) -> int:
    """Run COMMAND while holding the lock NAME (put -- before the command).

    The command gets TENURE_TOKEN (its fencing token), TENURE_LOCK and TENURE_STORE in its
    environment, runs in its own process group, and receives SIGINT, SIGTERM and SIGHUP sent to
    tenure. If tenure dies, the command dies too (Linux). If renewals fail, the command gets
    SIGTERM --grace seconds before the lease's deadline and SIGKILL at it, before anyone else
    can get the lock (exit 76; 77 if tenure was paused past the deadline, 78 if the store says
    the session is gone: SIGKILL at once).
    """
    grace_s = _check_inputs(name, ttl, timeout, grace, label, lock_delay)
    if read and write:  # (one flag each: with one shared destination the last would win)
        raise click.UsageError("--read and --write do not go together: pick one")
    mode = "read" if read else "write" if write else None
    if permits is not None and mode is not None:
        raise click.UsageError(f"--permits and --{mode} do not go together: pick one")
    if permits is not None:
        check_semaphore(name, permits)
    elif mode is not None:
        check_readers(name, DEFAULT_READERS)
    else:
        check_plain(name)  # a recipe's own name: refused before the store is opened (or made)
    try:
        resolve_command(command[0])
    except CommandError as exc:
        error(str(exc))
        return exc.code
    try:
        with _signals_interrupt():
            return _locked_run(
                name, command, ttl, wait, timeout, grace_s, lock_delay, store, require, label,
                quiet, permits, mode,
            )  # fmt: skip
    except Interrupted as exc:
        what = signal.Signals(exc.signum).name
        if not quiet:
            click.echo(f"tenure: interrupted by {what}; lock {name!r} not held", err=True)
        return EXIT_SIGNAL_BASE + exc.signum


def _locked_run(
    name: str,
    command: tuple[str, ...],
    ttl: float,
    wait: bool,
    timeout: float | None,
    grace: float,
    lock_delay: float | None,
    store: str | None,
    require: Grade | None,
    label: str,
    quiet: bool,
    permits: int | None = None,
    mode: str | None = None,
) -> int:
    client = open_client(store, label, require, quiet, lock_delay)
    try:
        on_wait = None if quiet or not wait else WaitReporter(name)
        extra_env: dict[str, str] = {}
        lease: tenure.Lease
        try:
            if mode is not None:
                lease = _rw_lease(client, name, mode, ttl, wait, timeout, quiet)
                extra_env.update(TENURE_MODE=mode)
            elif permits is None:
                lease = client.lock(name, ttl, on_wait=on_wait).acquire(wait=wait, timeout=timeout)
            else:
                permit = _permit(client, name, permits, ttl, wait, timeout, quiet)
                extra_env.update(TENURE_SEMAPHORE=name, TENURE_PERMIT=str(permit.index))
                lease = permit
        except tenure.NotAcquired as exc:
            how = "--no-wait" if not wait else f"gave up after --timeout {timeout or 0:g}s"
            if not quiet and mode is not None:
                click.echo(
                    f"tenure: {mode} lock of {name!r} not acquired ({how}): "
                    + ("a writer holds it or others are in line" if mode == "read" else
                       "readers or a writer hold it, or others are in line"),
                    err=True,
                )  # fmt: skip
            elif not quiet and permits is not None:
                click.echo(
                    f"tenure: no permit of {name!r} acquired ({how}): all {permits} are held",
                    err=True,
                )
            elif not quiet:
                holder = exc.lock
                who = (
                    f"held by {describe(holder)}"
                    if holder is not None
                    else "held back by lock-delay, or others are ahead in the queue"
                )
                click.echo(f"tenure: lock {name!r} not acquired ({how}): {who}", err=True)
            return EXIT_BUSY
        try:
            return _supervise(lease, command, child_url(store, client), grace, extra_env).code
        finally:
            lease.release()
    finally:
        client.close()


def _permit(
    client: tenure.Client,
    name: str,
    permits: int,
    ttl: float,
    wait: bool,
    timeout: float | None,
    quiet: bool,
) -> tenure.Permit:
    """One permit of semaphore ``name``; one stderr line if it has to wait for it."""
    semaphore = client.semaphore(name, permits, ttl)
    try:
        return semaphore.acquire(wait=False)
    except tenure.NotAcquired:
        if not wait:
            raise
    if not quiet:
        click.echo(f"tenure: waiting for one of the {permits} permits of {name!r}", err=True)
    return semaphore.acquire(timeout=timeout)


def _rw_lease(
    client: tenure.Client,
    name: str,
    mode: str,
    ttl: float,
    wait: bool,
    timeout: float | None,
    quiet: bool,
) -> tenure.RWLease:
    """The read or write lock of ``name``; one stderr line if it has to wait for it."""
    rwlock = client.rwlock(name, ttl)
    side = rwlock.read if mode == "read" else rwlock.write
    try:
        return side.acquire(wait=False)
    except tenure.NotAcquired:
        if not wait:
            raise
    if not quiet:
        click.echo(f"tenure: waiting for the {mode} lock of {name!r}", err=True)
    return side.acquire(timeout=timeout)


EXIT_FOR = {
    Cause.RENEWALS: EXIT_LOST, Cause.PAUSED: EXIT_PAUSED, Cause.GONE: EXIT_GONE,
    Cause.REVOKED: EXIT_GONE,
}  # fmt: skip


@dataclass(frozen=True)
class Outcome:
    code: int
    """What tenure exits with: the command's code, or tenure's own when it stopped it."""
    stopped: bool
    """The lease stopped the command (or was lost while it ran): its end means nothing."""


def _supervise(
    lease: tenure.Lease,
    command: tuple[str, ...],
    url: str,
    grace: float,
    extra_env: dict[str, str] | None = None,
    forwarded: list[int] | None = None,
) -> Outcome:
    """Run ``command`` while ``lease`` holds; stop it by the lease's deadline (see
    `tenure.cli.stopby`). Returns once no process of its group remains. The signals passed on to
    it are added to ``forwarded``."""
    env = dict(os.environ)
    env.update(TENURE_TOKEN=str(lease.token), TENURE_LOCK=lease.name, TENURE_STORE=url)
    env.update(extra_env or {})
    what = f"lease on {lease.name!r} (token {lease.token})"

    def report(signum: signal.Signals, cause: Cause, left: float) -> None:
        if signum == signal.SIGTERM:
            message = (
                f"renewals are overdue; stopping the command: SIGTERM now, SIGKILL at the "
                f"deadline in {max(0.0, left):.1f}s"
            )
        elif cause is Cause.RENEWALS:
            message = "renewals failed and the deadline is reached: SIGKILL to the command"
        else:
            message = f"{cause.value}: SIGKILL to the command at once; another may hold the lock"
        click.echo(f"tenure: {what}: {message}", err=True)

    try:
        with running(command, env) as child:
            child.watch(lease, grace, report)
            code = child.wait()
            if forwarded is not None:
                forwarded.extend(child.forwarded)
    except CommandError as exc:
        error(str(exc))
        return Outcome(exc.code, stopped=False)
    cause = child.stopped
    if cause is None:
        return Outcome(code, stopped=False)
    if cause is Cause.RENEWALS:
        settle(lease)  # it obeyed SIGTERM before the deadline: lost, or renewed since?
    if lease.lost:
        reason = one_line(lease.lost_reason or "lost")
        click.echo(f"tenure: {what} lost ({cause.value}): {reason}", err=True)
    else:
        click.echo(
            f"tenure: {what}: renewals recovered after SIGTERM was sent; the command stopped "
            "anyway",
            err=True,
        )
    return Outcome(EXIT_FOR[cause], stopped=True)


__all__ = [
    "Interrupted",
    "Outcome",
    "WaitReporter",
    "describe",
    "run",
    "signals_interrupt",
    "supervise",
]
supervise = _supervise
signals_interrupt = _signals_interrupt
check_inputs = _check_inputs
