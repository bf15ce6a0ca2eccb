"""``--metrics ADDR`` and ``--metrics-textfile PATH``: the CLI's Prometheus metrics, one line
per command (docs/metrics.md).

A long-running command (``tenure elect``, ``tenure cron``) takes `serve_option`: tenure's
metrics served on ADDR by prometheus_client's own ``start_http_server`` from the start, with
the process's own (prometheus_client's default collectors). A one-shot command (``tenure run``,
``tenure once``) takes `textfile_option`: the metrics written at exit, atomically, in
node_exporter's textfile format (``write_to_textfile``), for its textfile collector.

Both act when the option is parsed (``expose_value=False``): the command's own code is
untouched, and the observers see every event from its first acquire on.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import ModuleType

import click

from tenure.metrics import Metrics

from . import error

DEFAULT_HOST = "127.0.0.1"
SERVE_HELP = (
    "Serve Prometheus metrics on ADDR: PORT or HOST:PORT (default host 127.0.0.1; give "
    "0.0.0.0 or another address explicitly to be scraped from elsewhere). Needs "
    "tenure[metrics]."
)
TEXTFILE_HELP = (
    "At exit, write Prometheus metrics to PATH (node_exporter's textfile format, atomically: "
    "name it *.prom in the textfile collector's directory). Needs tenure[metrics]."
)


def parse_address(text: str) -> tuple[str, int]:
    """``PORT``, ``HOST:PORT`` or ``[V6]:PORT`` → (host, port); ``ValueError`` if malformed."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host = DEFAULT_HOST
    elif host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not PORT or HOST:PORT (a port from 1 to 65535)")
    return host, int(port)


def _prometheus(param: click.Parameter) -> ModuleType:
    """prometheus_client, or a usage error saying how to install it."""
    try:
        import prometheus_client
    except ImportError:
        raise click.BadParameter(
            "needs prometheus_client: pip install 'tenure[metrics]'", param=param
        ) from None
    return prometheus_client


def _serve(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is None:
        return
    try:
        host, port = parse_address(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None
    prometheus = _prometheus(param)
    metrics = Metrics()  # on the default registry, beside the process's own metrics
    try:
        prometheus.start_http_server(port, addr=host)
    except OSError as exc:
        metrics.close()
        reason = exc.strerror or str(exc)
        raise click.BadParameter(f"cannot serve on {value}: {reason}", ctx, param) from None


def _textfile(ctx: click.Context, param: click.Parameter, value: Path | None) -> None:
    if value is None:
        return
    folder = value.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise click.BadParameter(f"{str(folder)!r} is not a writable directory", ctx, param)
    prometheus = _prometheus(param)
    registry = prometheus.CollectorRegistry()  # tenure's metrics only: no process ones
    metrics = Metrics(registry)
    written = prometheus.Gauge(
        "tenure_textfile_written_timestamp_seconds",
        "When this file was written (the command's exit), in Unix time.",
        registry=registry,
    )

    def write() -> None:
        written.set(time.time())
        try:
            prometheus.write_to_textfile(str(value), registry)
        except OSError as exc:
            error(f"cannot write --metrics-textfile {str(value)!r}: {exc.strerror or exc}")
        finally:
            metrics.close()

    ctx.call_on_close(write)


serve_option = click.option(
    "--metrics",
    metavar="ADDR",
    default=None,
    expose_value=False,
    callback=_serve,
    help=SERVE_HELP,
)
"""``--metrics ADDR`` on a long-running command."""

textfile_option = click.option(
    "--metrics-textfile",
    metavar="PATH",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    expose_value=False,
    callback=_textfile,
    help=TEXTFILE_HELP,
)
"""``--metrics-textfile PATH`` on a one-shot command."""
