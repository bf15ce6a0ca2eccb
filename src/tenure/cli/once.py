"""``tenure once NAME --slot KEY -- CMD``: the same line on every server; each slot runs once.

The first server to claim (NAME, KEY) runs CMD as ``tenure run`` would (its token in the
environment, stopped if the lease is lost, signals passed on), with TENURE_JOB, TENURE_SLOT and
TENURE_ATTEMPT besides; the end is recorded with the token, the server, start, end and exit
code. The others exit at once: 0 if the slot is already over (done or failed), 75 if it is
running elsewhere. With ``--wait`` they wait for the runner instead, then exit 0 once it
recorded the end — or, if it died without recording one, run the slot again (at-least-once) or
mark it failed (at-most-once).
"""

from __future__ import annotations

import signal

import click

import tenure
from tenure.checks import POLICIES, Grade, Policy, check_policy, check_slot

from . import (
    EXIT_BUSY,
    EXIT_CODES_HELP,
    EXIT_LOST,
    EXIT_OK,
    EXIT_SIGNAL_BASE,
    child_url,
    error,
    lease_options,
    one_line,
    open_client,
)
from .child import CommandError, resolve_command
from .metrics import textfile_option
from .run import Interrupted, check_inputs, signals_interrupt, supervise


def policy_option(func: click.decorators.FC) -> click.decorators.FC:
    return click.option(
        "--policy",
        type=click.Choice(POLICIES),
        default="at-least-once",
        show_default=True,
        help="A slot whose runner died before recording its end: run it again (at-least-once) "
        "or mark it failed (at-most-once).",
    )(func)


def run_slot(
    client: tenure.Client,
    job: str,
    slot: str,
    command: tuple[str, ...],
    *,
    ttl: float,
    grace: float,
    policy: Policy,
    wait: bool,
    timeout: float | None,
    quiet: bool,
    url: str,
) -> tuple[int, int | None]:
    """Claim the slot and run ``command`` for it if this server is to: the exit code to report,
    and the signal for tenure that stopped the command, if one did (then no end is recorded).

    Signals while waiting raise ``Interrupted`` (nothing held); while the command runs they are
    passed on to it.
    """
    with signals_interrupt():
        run = client.once(job, slot, ttl, policy=policy, wait=wait, timeout=timeout).acquire()
    if not run:
        if not quiet:
            click.echo(f"tenure: {job} {slot}: {_not_here(run)}", err=True)
        return (EXIT_BUSY if run.state == "running" else EXIT_OK), None
    assert run.lease is not None
    if not quiet:
        click.echo(
            f"tenure: {job} {slot}: running here (attempt {run.attempt}, token {run.token})",
            err=True,
        )
    env = {"TENURE_JOB": job, "TENURE_SLOT": slot, "TENURE_ATTEMPT": str(run.attempt)}
    forwarded: list[int] = []
    try:
        outcome = supervise(run.lease, command, url, grace, env, forwarded)
    except BaseException:
        run.abandon()
        raise
    code = outcome.code
    if outcome.stopped or forwarded:
        # Lost, or this server is being stopped: no end is recorded, so another server runs
        # the slot again (at-least-once) or marks it failed (at-most-once).
        run.abandon()
        if forwarded and not quiet:
            click.echo(f"tenure: {job} {slot}: stopped by a signal; end not recorded", err=True)
        return code, forwarded[0] if forwarded else None
    try:
        end = run.complete(code)
    except tenure.LeaseLost as exc:
        error(f"{job} {slot}: end not recorded: {exc}")
        return EXIT_LOST, None
    except tenure.StaleToken as exc:
        error(f"{job} {slot}: end refused: the slot was claimed again since ({exc})")
        return EXIT_LOST, None
    if not quiet:
        click.echo(f"tenure: {job} {slot}: {end.state} (exit {code})", err=True)
    return code, None


def _not_here(run: tenure.Claim) -> str:
    slot = run.record
    if slot is None:
        return "running elsewhere"
    who = f"{slot.server}" + (f" ({slot.label})" if slot.label else "")
    if run.state == "running":
        return f"running elsewhere: attempt {slot.attempts} on {who}, token {slot.token}"
    detail = f"exit {slot.exit_code}" if slot.exit_code is not None else one_line(slot.error or "")
    return f"already {slot.state} by {who}, token {slot.token} ({detail})"


@click.command(
    epilog=EXIT_CODES_HELP,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.argument("name")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option(
    "--slot",
    "slot_key",
    required=True,
    metavar="KEY",
    help='Which run of the job this is, the same on every server, e.g. "$(date -u +%F)".',
)
@policy_option
@click.option(
    "--wait",
    is_flag=True,
    help="If the slot is running elsewhere, wait: exit 0 when it ends there, or take it over "
    "if its runner dies (default: exit 75 at once).",
)
@click.option("--timeout", type=float, default=None, metavar="S", help="Give up waiting (75).")
@textfile_option
@lease_options(
    ttl="Lease TTL: a dead runner's slot is taken over this long after it died.",
    label="A label shown by 'tenure history' and 'tenure ls'.",
    quiet="Say nothing on stderr except errors.",
)
def once(
    name: str,
    command: tuple[str, ...],
    slot_key: str,
    policy: Policy,
    wait: bool,
    timeout: float | None,
    ttl: float,
    grace: float | None,
    lock_delay: float | None,
    store: str | None,
    require: Grade | None,
    label: str,
    quiet: bool,
) -> int:
    """Run COMMAND for slot KEY of job NAME, unless another server runs or ran it.

    Exit: the command's code if it ran here; 0 if the slot was already over; 75 if it is
    running elsewhere (without --wait); 76-78 if the lease was lost (the end is not recorded).
    """
    grace_s = check_inputs(name, ttl, timeout, grace, label, lock_delay)
    check_slot(slot_key)
    check_policy(policy)
    try:
        resolve_command(command[0])
    except CommandError as exc:
        error(str(exc))
        return exc.code
    client = open_client(store, label, require, quiet, lock_delay)
    try:
        code, _ = run_slot(
            client, name, slot_key, command,
            ttl=ttl, grace=grace_s, policy=policy, wait=wait, timeout=timeout, quiet=quiet,
            url=child_url(store, client),
        )  # fmt: skip
        return code
    except Interrupted as exc:
        if not quiet:
            what = signal.Signals(exc.signum).name
            click.echo(f"tenure: interrupted by {what}; slot {slot_key!r} not run here", err=True)
        return EXIT_SIGNAL_BASE + exc.signum
    finally:
        client.close()
