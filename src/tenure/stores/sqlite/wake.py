"""Wake-ups by FIFO: SQLite has no notifications, so each waiter and each watch listens on its own
FIFO in the wake directory beside the store's file, and whoever changes what it waits for writes
one byte to it after committing. A FIFO that nobody reads any more belongs to a process that is
gone: that is how a dead waiter or watch is found."""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from pathlib import Path

import anyio

from ..._errors import StoreUnavailable

Fifo = tuple[Path, int]
"""A FIFO we listen on: its path and our (read-write) descriptor."""


class Fifos:
    """The wake directory's FIFOs, for one store: made, reused and opened for waking."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._spare: list[Fifo] = []  # kept open for reuse by later waits

    def make(self) -> Fifo:
        try:
            self.directory.mkdir(mode=0o700, exist_ok=True)
            path = self.directory / uuid.uuid4().hex
            os.mkfifo(path, 0o600)
            # Read-write, so the FIFO never reports end-of-file while we listen (Linux).
            return path, os.open(path, os.O_RDWR | os.O_NONBLOCK)
        except OSError as exc:
            raise StoreUnavailable(
                f"cannot create wake-up FIFO in {self.directory}: {exc}"
            ) from None

    def spare(self) -> Fifo | None:
        """One kept from an earlier wait, if any."""
        return self._spare.pop() if self._spare else None

    def give_back(self, path: Path, fd: int) -> None:
        """Keep a FIFO for the next wait; stale wake-ups in it would only cause a spurious retry."""
        with contextlib.suppress(OSError):
            os.read(fd, 4096)
        self._spare.append((path, fd))

    def close(self) -> None:
        while self._spare:
            drop(*self._spare.pop())

    def open(self, wake: str) -> int | None:
        """The write end of the FIFO named ``wake``; None (and the FIFO removed) if nobody reads
        it any more. Other errors are raised."""
        try:
            return os.open(self.directory / wake, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno not in (errno.ENXIO, errno.ENOENT):
                raise
        with contextlib.suppress(OSError):
            (self.directory / wake).unlink()
        return None


def drop(path: Path, fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
    with contextlib.suppress(OSError):
        path.unlink()


def wake_up(fds: list[int]) -> None:
    """After commit: one byte to each handed-to waiter's or watch's FIFO (and its write end
    closed)."""
    for fd in fds:
        try:
            os.write(fd, b"!")
        except BlockingIOError:
            pass  # its pipe is full of earlier wake-ups: it wakes anyway
        except OSError:
            pass  # its reader went away since the check (EPIPE): nobody left to wake
        finally:
            os.close(fd)


def drain(fd: int) -> None:
    """Read the wake-up bytes waiting in our FIFO."""
    with contextlib.suppress(BlockingIOError):
        os.read(fd, 4096)


async def woken(fd: int, timeout: float) -> None:
    """Return once our FIFO has a wake-up in it, or after ``timeout``."""
    with anyio.move_on_after(timeout):
        await anyio.wait_readable(fd)
