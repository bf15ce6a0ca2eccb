"""What every ``--watch`` of the CLI shares (``tenure partitions``, ``tenure ls``): read the
store again when woken (a watch) or every ``REREAD`` seconds at most (an expiry nobody
announces), show a new frame only when what it shows changed, and end on Ctrl-C."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TypeVar

import click

REREAD = 1.0
"""Seconds between two reads at most while watching."""

T = TypeVar("T")


async def changes(
    now: T,
    read: Callable[[], Awaitable[T]],
    settled: Callable[[T], object],
    pause: Callable[[T], Awaitable[None]],
) -> AsyncIterator[T]:
    """Each new reading whose ``settled`` view (what a frame shows, less the seconds left)
    differs from the last one yielded, starting after ``now``; ``pause(now)`` returns when it
    is time to read again (a watch woke it, or ``REREAD`` passed). Until cancelled."""
    while True:
        await pause(now)
        last, now = now, await read()
        if settled(now) != settled(last):
            yield now


def frame(text: str) -> None:
    """Show one frame: on a terminal in place of the last one (a live table), else followed
    by a blank line, so a script or a pipe reading lines knows the frame is complete."""
    if sys.stdout.isatty():
        click.clear()
        click.echo(text)
    else:
        click.echo(text + "\n")


@contextlib.contextmanager
def on_interrupt(stop: Callable[[], object]) -> Iterator[None]:
    """Ctrl-C calls ``stop`` on the loop, instead of asyncio's cancelling the main task: that
    cancel could meet one of anyio's own (a read's time-out) and be taken for it."""
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, stop)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)
