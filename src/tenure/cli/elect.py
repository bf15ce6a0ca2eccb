"""``tenure elect NAME -- CMD``: every server runs the same line; the one that leads runs CMD.

The leader's command gets TENURE_TERM (its fencing token) besides what ``tenure run`` gives. On
loss of leadership the command's process group is stopped (SIGTERM, SIGKILL after --grace) and
tenure campaigns again; when the command exits, tenure resigns and exits with its code, or with
``--restart`` keeps leading and starts it again.
"""

from __future__ import annotations

import signal
import socket

import click

from tenure.checks import Grade, check_plain, check_value

from . import (
    EXIT_CODES_HELP,
    EXIT_LOST,
    EXIT_SIGNAL_BASE,
    child_url,
    error,
    lease_options,
    open_client,
)
from .child import CommandError, resolve_command
from .metrics import serve_option
from .run import Interrupted, check_inputs, signals_interrupt, supervise


@click.command(
    epilog=EXIT_CODES_HELP,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.argument("name")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option(
    "--value", default=None, help="What to proclaim as leader (default: this host's name)."
)
@click.option(
    "--restart",
    is_flag=True,
    help="When the command exits, keep leading and start it again (default: resign and exit "
    "with its code).",
)
@serve_option
@lease_options(
    ttl="Lease TTL of the leadership, in seconds; renewed every TTL/3.",
    label="A label shown by 'tenure leader' and 'tenure ls'.",
    quiet="Do not report terms won and lost.",
)
def elect(
    name: str,
    command: tuple[str, ...],
    value: str | None,
    ttl: float,
    grace: float | None,
    lock_delay: float | None,
    restart: bool,
    store: str | None,
    require: Grade | None,
    label: str,
    quiet: bool,
) -> int:
    """Campaign for leadership of NAME and run COMMAND while leading (put -- before it)."""
    grace_s = check_inputs(name, ttl, None, grace, label, lock_delay)
    check_plain(name)  # before the store is opened (or made)
    value = check_value(socket.gethostname() if value is None else value)
    try:
        resolve_command(command[0])
    except CommandError as exc:
        error(str(exc))
        return exc.code
    client = open_client(store, label, require, quiet, lock_delay)
    url = child_url(store, client)
    try:
        while True:
            try:
                with signals_interrupt():
                    leadership = client.election(name, ttl, value=value).acquire()
            except Interrupted as exc:
                if not quiet:
                    what = signal.Signals(exc.signum).name
                    click.echo(f"tenure: interrupted by {what}; not leading {name!r}", err=True)
                return EXIT_SIGNAL_BASE + exc.signum
            if not quiet:
                click.echo(f"tenure: leading {name!r} (term {leadership.term})", err=True)
            try:
                code, stopped, signals = EXIT_LOST, True, list[int]()
                while not leadership.lost:
                    env = {"TENURE_TERM": str(leadership.term), "TENURE_ELECTION": name}
                    outcome = supervise(leadership, command, url, grace_s, env, signals)
                    code, stopped = outcome.code, outcome.stopped
                    if stopped or not restart or signals:
                        break  # a signal for tenure ends it, --restart or not
            finally:
                leadership.release()
            if not stopped and not leadership.lost:
                return code
            if not quiet:
                click.echo(f"tenure: lost {name!r} (term {leadership.term}); campaigning", err=True)
    finally:
        client.close()
