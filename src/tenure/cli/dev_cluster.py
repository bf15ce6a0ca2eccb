"""``tenure dev-cluster KIND``: a real store on loopback, to try tenure in one command.

The same launchers the test suite and ``tenure chaos`` use (each store's ``server`` in the store
registry, e.g. ``tenure.stores.etcd.server``): data in a temporary directory, free 127.0.0.1
ports, everything stopped and removed on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

import click

from ..chaos.servers import launch
from ..stores import by_key, entries
from . import EXIT_UNAVAILABLE, error, one_line


@click.command(
    name="dev-cluster",
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.argument("kind", type=click.Choice([e.key for e in entries() if e.server is not None]))
@click.option(
    "--members",
    type=click.IntRange(1, 7),
    default=3,
    show_default=True,
    help="etcd or ZooKeeper members (n members tolerate (n-1)/2 failures).",
)
def dev_cluster(kind: str, members: int) -> int:
    """Start a throw-away KIND store on loopback, print its URL, stop it on Ctrl-C.

    For trying tenure across processes: `export TENURE_STORE=<url>` in other shells. Not for
    production: no TLS, no authentication, data deleted on exit.
    """
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, on_signal)
    try:
        server = launch(kind, members if by_key()[kind].members else None)
        try:
            server.start()
            url = server.url
            click.echo(url)
            click.echo(
                f"tenure: {kind} is up; export TENURE_STORE={url} (Ctrl-C stops it)", err=True
            )
            stop.wait()
        finally:
            server.close()  # also after a failed start: nothing left running or on disk
    except (RuntimeError, OSError) as exc:  # a missing binary, a server that would not start
        error(f"cannot start {kind}: {one_line(str(exc))}")
        return EXIT_UNAVAILABLE
    click.echo(f"tenure: {kind} stopped and removed", err=True)
    return 0
