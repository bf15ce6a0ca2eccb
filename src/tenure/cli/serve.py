"""``tenure serve``: a read-only web page and JSON API over the store, updated live
(docs/serve.md). Loopback only unless ``--public``: the page shows every lock, holder and job.
``--allow-revoke`` adds a revoke button (a safe revoke, never ``--now``); off by default."""

from __future__ import annotations

import ipaddress
import signal
import socket
from types import FrameType
from typing import TYPE_CHECKING

import anyio
import click

import tenure

from . import EXIT_SIGNAL_BASE, store_option

if TYPE_CHECKING:
    import uvicorn

    from .web.app import Feed

DEFAULT_PORT = 8400
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "[::1]"]
"""Host headers a loopback-only server answers (any other: a DNS name rebound to it)."""


def _loopback(host: str, port: int) -> bool:
    """Every address ``host`` names is a loopback one (``localhost``, ``127.0.0.1``, ``::1``)."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise click.UsageError(f"cannot resolve --host {host!r}: {exc}") from None
    return all(ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in found)


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything else runs: a port in use is an error line,
    and with ``--port 0`` the port is known before the URL is printed."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        raise click.UsageError(f"cannot listen on {host} port {port}: {exc.strerror}") from None


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/"


def _server(
    config: uvicorn.Config, url: str, feed: Feed, signals: list[int], mode: str
) -> uvicorn.Server:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, which prints the page's URL once it accepts connections, ends the
        event streams as it stops (it waits for every open response) and notes in ``signals``
        which signal stopped it."""

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            signals.append(sig)
            super().handle_exit(sig, frame)

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started:
                click.echo(f"tenure serve: {url} ({mode}; Ctrl-C stops)")

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            feed.close()
            await super().shutdown(sockets)

    return Server(config)


async def _serve(
    sock: socket.socket,
    store: str | None,
    interval: float,
    allowed: list[str] | None,
    allow_revoke: bool,
) -> int:
    """Serve until a signal stops it; the exit code (128 + the signal's number)."""
    import uvicorn

    from .web.app import make_app

    # The label names this server in what it revokes ("revoked by USER@HOST pid N (tenure serve)").
    async with tenure.connect_async(store, label="tenure serve") as client:
        app = make_app(client, interval, allowed, allow_revoke)
        config = uvicorn.Config(
            app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=2
        )
        signals: list[int] = []
        if not allow_revoke:
            mode = "read-only"
        elif client.capabilities.revoke:
            mode = "revoke allowed"
        else:
            mode = f"read-only: the {client.capabilities.grade} store cannot revoke"
        await _server(config, _url(sock), app.state.feed, signals, mode).serve(sockets=[sock])
    return EXIT_SIGNAL_BASE + (signals[0] if signals else signal.SIGINT)


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on. Anything but a loopback address needs --public.",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="Port to listen on; 0 picks a free one (the URL printed says which).",
)
@click.option(
    "--public",
    is_flag=True,
    help="Allow a non-loopback --host (e.g. 0.0.0.0): whoever reaches it sees every lock name, "
    "holder host, pid and label, and job history. No login, no TLS: put it behind your own.",
)
@click.option(
    "--interval",
    type=click.FloatRange(0.05, 60),
    default=1.0,
    show_default=True,
    metavar="S",
    help="Seconds between two reads of the store (one read for every viewer).",
)
@click.option(
    "--allow-revoke",
    is_flag=True,
    help="Add a revoke button to each held lock, permit and writer: a safe revoke of the grant "
    "shown (its token; never --now), recorded as by this server. Whoever can load the page can "
    "revoke: keep it on loopback or behind your own login.",
)
@store_option
def serve(
    host: str, port: int, public: bool, interval: float, allow_revoke: bool, store: str | None
) -> int:
    """Serve a read-only page of the store, updated live: locks and holders, tokens and time
    left, waiters, held-back names, semaphores, read-write locks, leaders, partition groups
    and once/cron history. Prints the URL when ready; Ctrl-C stops it. With --allow-revoke,
    a button revokes a grant as tenure revoke NAME --token T does.

    \b
    GET /             the page
    GET /api/state    everything, as JSON (docs/serve.md)
    GET /api/events   the same, as server-sent events, on each change
    GET /healthz      200 if the store can be read, else 503 and one line
    GET /metrics      Prometheus metrics (where prometheus_client is installed)
    POST /api/revoke  {"name", "token"[, "reason"]}: only with --allow-revoke (docs/serve.md)
    """
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise click.UsageError(
            "tenure serve needs its extra: pip install 'tenure[serve]'"
        ) from None
    loopback = _loopback(host, port)
    if not loopback and not public:
        raise click.UsageError(
            f"--host {host} is not a loopback address: add --public to show every lock and"
            " holder to whoever reaches it (docs/serve.md)"
        )
    sock = _listen(host, port)
    named = f"[{host}]" if ":" in host else host  # as a Host header names it
    try:
        return anyio.run(
            _serve,
            sock,
            store,
            interval,
            [*LOOPBACK_HOSTS, named] if loopback else None,
            allow_revoke,
        )
    except KeyboardInterrupt:
        return EXIT_SIGNAL_BASE + signal.SIGINT
    finally:
        sock.close()
