"""The ``tenure`` command line: ``tenure run``, ``tenure ls``, ``tenure demo``.

Every error is one line on stderr (``tenure: error: …``) and a documented exit code; the codes
are defined here, once, and shown by ``tenure --help``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ClassVar

import click

from tenure import InvalidArgument, NotAcquired, StoreUnavailable, TenureError
from tenure.checks import GRADES, Grade

if TYPE_CHECKING:
    from tenure import Client

# -- exit codes (the one place they are defined; docs/cli.md and --help list the same) ----------
EXIT_OK = 0
EXIT_NOT_HELD = 1
"""``tenure ls NAME`` / ``tenure revoke NAME``: the lock is not held; ``tenure leader NAME``:
nobody leads; ``tenure partitions GROUP``: the group has no members."""
EXIT_VIOLATION = 1
"""``tenure chaos``: the checkers found at least one violation."""
EXIT_USAGE = 2
"""Bad input: a bad option, TTL, timeout, lock name or store URL."""
EXIT_UNAVAILABLE = 69
"""The store cannot be opened, read or written (sysexits EX_UNAVAILABLE)."""
EXIT_BUSY = 75
"""Not acquired: the lock is held and --no-wait was given or --timeout passed (EX_TEMPFAIL)."""
EXIT_LOST = 76
"""Renewals failed while the command ran: it was stopped by the lease's deadline."""
EXIT_PAUSED = 77
"""tenure found itself past the lease's deadline (it was paused): the command was killed."""
EXIT_GONE = 78
"""The store said the session was gone (or the grant revoked: ``tenure revoke``) while the
command ran: the command was killed."""
EXIT_NOT_EXECUTABLE = 126
"""The command exists but cannot be executed (as a shell)."""
EXIT_NOT_FOUND = 127
"""The command was not found (as a shell)."""
EXIT_SIGNAL_BASE = 128
"""128+N: the command was killed by signal N, or tenure was interrupted by N while waiting."""

EXIT_CODES_HELP = """\b
Exit codes:
  0-125    tenure run/once/cron: the command's own exit code (tenure once: 0 also
           when the slot was already over)
  1        tenure ls/revoke NAME: not held; tenure leader NAME: nobody leads;
           tenure partitions GROUP: no members; tenure chaos: a violation was found
  2        bad input (option, TTL, timeout, lock name, store URL)
  69       the store is unavailable (cannot be opened, read or written)
  75       busy: not acquired (--no-wait, or --timeout passed); tenure once: the slot
           is running elsewhere
  76       renewals failed while the command ran: it was stopped by the deadline
  77       tenure was paused past the lease's deadline: the command was killed
  78       the store said the session was gone (or the grant revoked): the command
           was killed
  126/127  the command cannot be executed / was not found
  128+N    the command was killed by signal N
  129/130/143  SIGHUP/SIGINT/SIGTERM while waiting for the lock (nothing held)
"""


DEFAULT_TTL = 30.0
GRACE_HELP = (
    "When renewals fail: seconds between SIGTERM and SIGKILL to the command's process group; "
    "SIGKILL comes at the lease's deadline, before anyone else can get the lock. Default and "
    "maximum: TTL/3 less drift and margin (9.6 for --ttl 30)."
)
LOCK_DELAY_HELP = (
    "Seconds nobody is granted the lock after this lease ends without a release (tenure was "
    "killed, paused or cut off). Default: the TTL, at most 15."
)


def lease_options(
    ttl: str, label: str, quiet: str
) -> Callable[[click.decorators.FC], click.decorators.FC]:
    """--ttl, --grace, --lock-delay, --store, --require, --label and -q, as every command that
    runs another under a lease takes them; the help says what each means for that command."""
    options = [
        click.option(
            "--ttl", type=float, default=DEFAULT_TTL, show_default=True, metavar="S", help=ttl
        ),
        click.option("--grace", type=float, default=None, metavar="S", help=GRACE_HELP),
        click.option("--lock-delay", type=float, default=None, metavar="S", help=LOCK_DELAY_HELP),
        store_option,
        require_option,
        click.option("--label", default="", help=label),
        click.option("-q", "--quiet", is_flag=True, help=quiet),
    ]

    def decorate(func: click.decorators.FC) -> click.decorators.FC:
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


def store_option(func: click.decorators.FC) -> click.decorators.FC:
    return click.option(
        "--store",
        metavar="URL",
        default=None,
        help="Store URL, e.g. sqlite:////abs/path.db or etcd://user@host:2379/ns?ca=FILE "
        "(default: $TENURE_STORE, else the embedded SQLite file). A password goes in "
        "$TENURE_PASSWORD, not on the command line.",
    )(func)


def require_option(func: click.decorators.FC) -> click.decorators.FC:
    return click.option(
        "--require",
        type=click.Choice(GRADES),
        default=None,
        help="correctness: refuse an efficiency-grade store (Redis), exit 2.",
    )(func)


def open_client(
    store: str | None,
    label: str,
    require: Grade | None,
    quiet: bool,
    lock_delay: float | None = None,
) -> Client:
    """Connect as a command does: refused if below ``require``; an efficiency-grade store is
    named as such on stderr (unless quiet), so nobody mistakes it for a correctness lock."""
    import tenure

    client = tenure.connect(store, label=label, require=require, lock_delay=lock_delay)
    if not quiet and client.capabilities.grade == "efficiency":
        click.echo(
            f"tenure: note: {client.url} is efficiency-grade: fine to avoid duplicate work, not"
            " for correctness (--require correctness refuses it)",
            err=True,
        )
    return client


def child_url(store: str | None, client: Client) -> str:
    """The store URL a command gets in $TENURE_STORE: the embedded store's absolute path, else
    the URL as the user gave it — ``client.url`` shows ``***`` for a password (the command is
    theirs, and a password from $TENURE_PASSWORD reaches it in its environment anyway)."""
    from tenure.checks import resolve_url

    given = resolve_url(store)
    return client.url if given.lower().startswith("sqlite:") else given


class _Commands(click.Group):
    """The subcommands, each in its own module, imported when used (and for --help)."""

    names: ClassVar[dict[str, str]] = {
        "run": "run",
        "ls": "ls",
        "demo": "demo",
        "dev-cluster": "dev_cluster",
        "chaos": "chaos",
        "elect": "elect",
        "leader": "leader",
        "once": "once",
        "cron": "cron",
        "history": "history",
        "partitions": "partitions",
        "serve": "serve",
        "revoke": "revoke",
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.names)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = self.names.get(cmd_name)
        if module is None:
            return None
        command = getattr(importlib.import_module(f"{__name__}.{module}"), module)
        assert isinstance(command, click.Command)
        return command


@click.group(
    cls=_Commands,
    epilog=EXIT_CODES_HELP,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(package_name="tenure", prog_name="tenure")
def cli() -> None:
    """Distributed locks, leases and fencing tokens."""


def error(message: str) -> None:
    """Print one error line on stderr."""
    click.echo(f"tenure: error: {one_line(message)}", err=True)


def one_line(message: str) -> str:
    return " ".join(message.split())


def columns(rows: Sequence[Sequence[str]]) -> str:
    """Rows as left-aligned columns two spaces apart (the first row is the header)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _usage_line(exc: click.UsageError) -> str:
    hint = ""
    if exc.ctx is not None:
        hint = f" (see '{exc.ctx.command_path} --help')"
    return f"{exc.format_message()}{hint}"


def main(argv: Sequence[str] | None = None) -> None:
    """The console entry point: run the command, turn every error into one line and a code."""
    try:
        code = cli.main(args=argv, prog_name="tenure", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:  # plain `tenure`: help, as click does
        click.echo(exc.format_message(), err=True)
        code = EXIT_USAGE
    except click.UsageError as exc:
        error(_usage_line(exc))
        code = EXIT_USAGE
    except click.ClickException as exc:
        error(exc.format_message())
        code = exc.exit_code
    except click.Abort:
        code = EXIT_SIGNAL_BASE + 2
    except InvalidArgument as exc:
        error(str(exc))
        code = EXIT_USAGE
    except StoreUnavailable as exc:
        error(str(exc))
        code = EXIT_UNAVAILABLE
    except NotAcquired as exc:
        click.echo(f"tenure: {one_line(str(exc))}", err=True)
        code = EXIT_BUSY
    except TenureError as exc:
        error(str(exc))
        code = 1
    sys.exit(code if isinstance(code, int) else EXIT_OK)


__all__ = ["cli", "main"]
