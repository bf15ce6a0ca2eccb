"""``tenure cron SCHEDULE NAME -- CMD``: a daemon every server runs; each slot runs on one.

At each slot of the schedule (UTC; a cron expression or ``every 30s``) the daemon waits a random
jitter, then does what ``tenure once NAME --slot <due time> --wait`` does: the first server to
claim the slot runs CMD, the others wait for it until the next slot is due — and take the slot
over if its runner dies without recording an end (at-least-once), or mark it failed
(at-most-once). The slot's key is its due time, so servers whose clocks differ by a few
seconds still agree on which slot it is. Slots missed while the daemon (or every server) was
down are skipped, or with ``--catch-up latest`` the latest of them is run once.
"""

from __future__ import annotations

import random
import signal
import time

import click

from tenure.checks import Grade, Policy, check_policy

from . import (
    EXIT_CODES_HELP,
    EXIT_OK,
    EXIT_SIGNAL_BASE,
    child_url,
    error,
    lease_options,
    open_client,
)
from .child import CommandError, resolve_command
from .metrics import serve_option
from .once import policy_option, run_slot
from .run import Interrupted, check_inputs, signals_interrupt
from .schedule import Schedule, parse_schedule, slot_key

DEFAULT_JITTER = 1.0


@click.command(
    epilog=EXIT_CODES_HELP,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.argument("schedule")
@click.argument("name")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@policy_option
@click.option(
    "--catch-up",
    type=click.Choice(["skip", "latest"]),
    default="skip",
    show_default=True,
    help="Slots missed while down: skip them, or run the latest of them once.",
)
@click.option(
    "--jitter",
    type=float,
    default=DEFAULT_JITTER,
    show_default=True,
    metavar="S",
    help="Wait a random 0..S seconds after a slot is due before claiming it.",
)
@click.option("--count", type=int, default=None, metavar="N", help="Stop after N slots.")
@serve_option
@lease_options(
    ttl="Lease TTL of each slot: a dead runner's slot is taken over this long after it died.",
    label="A label shown by 'tenure history' and 'tenure ls'.",
    quiet="Say nothing on stderr except errors.",
)
def cron(
    schedule: str,
    name: str,
    command: tuple[str, ...],
    policy: Policy,
    catch_up: str,
    jitter: float,
    ttl: float,
    grace: float | None,
    lock_delay: float | None,
    count: int | None,
    store: str | None,
    require: Grade | None,
    label: str,
    quiet: bool,
) -> int:
    """Run COMMAND for each slot of SCHEDULE (UTC) on exactly one of the servers running this.

    SCHEDULE is a cron expression ("0 2 * * *") or an interval ("every 30s", units ms, s, m,
    h). Prints one line at start (job, schedule, next slot, store). Runs until stopped, or
    for --count slots. SIGINT/SIGTERM are a requested stop: exit 0, also while a slot runs
    (its command gets the signal and its end is not recorded: the slot is left to another
    server, by --policy).
    """
    grace_s = check_inputs(name, ttl, None, grace, label, lock_delay)
    check_policy(policy)
    plan = parse_schedule(schedule)
    if not 0 <= jitter < 3600 or (count is not None and count < 1):
        error("--jitter must be 0 to 3600 seconds and --count at least 1")
        return 2
    try:
        resolve_command(command[0])
    except CommandError as exc:
        error(str(exc))
        return exc.code
    client = open_client(store, label, require, quiet, lock_delay)
    try:
        with signals_interrupt():  # from the start line on: a stop is never a traceback
            return _loop(
                client, child_url(store, client), plan, name, command, policy, catch_up,
                jitter, ttl, grace_s, count, quiet,
            )  # fmt: skip
    except Interrupted as exc:  # between slots, or while waiting for another's runner
        return _stopped(name, exc.signum, EXIT_SIGNAL_BASE + exc.signum, quiet)
    finally:
        client.close()


STOPS = (signal.SIGINT, signal.SIGTERM)
"""What `systemctl stop` or Ctrl-C sends: a requested stop, exit 0 (a unit stopped on
purpose must not show as failed)."""


def _stopped(name: str, signum: int, code: int, quiet: bool) -> int:
    """What the daemon exits with once ``signum`` stopped it; ``code`` unless it was asked to."""
    if not quiet:
        click.echo(f"tenure: cron {name!r} stopped by {signal.Signals(signum).name}", err=True)
    return EXIT_OK if signum in STOPS else code


def _loop(
    client: object,
    url: str,
    plan: Schedule,
    name: str,
    command: tuple[str, ...],
    policy: Policy,
    catch_up: str,
    jitter: float,
    ttl: float,
    grace: float,
    count: int | None,
    quiet: bool,
) -> int:
    import tenure

    assert isinstance(client, tenure.Client)
    now = time.time()
    due = plan.latest_at_or_before(now) if catch_up == "latest" else plan.next_after(now)
    if not quiet:
        click.echo(
            f"tenure: cron {name!r} on {plan.text!r} (UTC): next slot {slot_key(due)} "
            f"in {_span(due - now)}; store {client.url}",
            err=True,
        )
    done = 0
    while count is None or done < count:
        with signals_interrupt():
            time.sleep(max(0.0, due - time.time()) + random.uniform(0, jitter))
        following = plan.next_after(due)
        code, signum = run_slot(
            client, name, slot_key(due), command,
            ttl=ttl, grace=grace, policy=policy, wait=True,
            timeout=max(0.1, following - time.time()), quiet=quiet, url=url,
        )  # fmt: skip
        if signum is not None:
            return _stopped(name, signum, code, quiet)
        done += 1
        now = time.time()
        if following > now:
            due = following
        elif catch_up == "latest":
            due = plan.latest_at_or_before(now)  # slots missed while this one ran: the latest
        else:
            due = plan.next_after(now)
    return EXIT_OK


def _span(seconds: float) -> str:
    """``0s``, ``42s``, ``3h12m``: how long until a slot is due (whole seconds, coarser above
    an hour)."""
    left = max(0, round(seconds))
    hours, rest = divmod(left, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
