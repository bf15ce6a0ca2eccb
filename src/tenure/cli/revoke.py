"""``tenure revoke NAME``: end a stuck holder's grant safely (docs/revoke.md).

The holder loses its lease at its next renewal (a ``tenure run`` kills its command, exit 78),
and nobody is granted NAME until the old lease could no longer be acting: its TTL from its last
renewal, plus its lock-delay. ``--now`` frees NAME at once, for a holder known to be dead.
"""

from __future__ import annotations

import click

from tenure import describe
from tenure.checks import Grade, check_name
from tenure.stores import revocations_of

from . import EXIT_NOT_HELD, EXIT_OK, one_line, open_client, require_option, store_option
from .ls import holder as holder_text
from .ls import shown

NOW_RISK = (
    "tenure: warning: --now freed {name!r} at once: if its holder is still running it may go on"
    " acting until its next renewal while the next holder acts too; only a fence on its token"
    " (docs/fencing.md) refuses its writes"
)


def _what(name: str) -> str:
    """Which grant a name is: a plain lock, or one lock of a recipe (a permit's place...)."""
    lock = describe(name)
    if lock is None:
        return f"lock {shown(name)!r}"
    return f"{lock.kind} {shown(lock.of)!r} ({shown(lock.part)})"


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.argument("name")
@click.option("--reason", default="", help="Why, recorded with the revocation (shown by ls).")
@click.option(
    "--now",
    is_flag=True,
    help="Free NAME at once, without waiting out the old lease's TTL and lock-delay. Only for "
    "a holder known to be dead: a live one may still act until its next renewal.",
)
@click.option("--token", type=int, default=None, help="Revoke only the grant with this token.")
@store_option
@require_option
@click.option("--label", default="", help="Recorded as the revoker's label.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing on success.")
def revoke(
    name: str,
    reason: str,
    now: bool,
    token: int | None,
    store: str | None,
    require: Grade | None,
    label: str,
    quiet: bool,
) -> int:
    """End the current grant of lock NAME: its holder loses it at its next renewal (tenure run
    kills its command, exit 78), and NAME is granted to nobody until the old lease could no
    longer be acting (its TTL from its last renewal, plus its lock-delay); the next token is
    higher. A recipe's lock (as tenure ls lists it: semaphore/NAME/2 is one permit,
    rwlock/NAME/gate a writer) revokes that one grant. Exit 1 if NAME is not held."""
    check_name(name)
    if not reason.isprintable():
        reason = one_line(reason)
    with open_client(store, label, require, quiet) as client:
        revocations_of(client.store)  # one line, exit 2, before anything is read
        held = client.locks(name)
        if token is None and held:
            token = held[0].token  # revoke the grant shown, not one granted since
        revoked = client.revoke(name, reason=reason, now=now, token=token)
    if revoked is None:
        which = "" if token is None else f" with token {token}"
        click.echo(f"tenure: {_what(name)} is not held{which}: nothing to revoke", err=True)
        return EXIT_NOT_HELD
    if now:
        click.echo(NOW_RISK.format(name=name), err=True)
    if not quiet:
        by = f" held by {holder_text(held[0])}" if held and held[0].token == revoked.token else ""
        after = (
            "it is free now"
            if now
            else f"nobody is granted it for {revoked.free_in:.1f}s (the old lease's time left"
            " and its lock-delay)"
        )
        click.echo(
            f"tenure: revoked {_what(name)} (token {revoked.token}){by}; its holder loses it at"
            f" its next renewal; {after}"
        )
    return EXIT_OK
