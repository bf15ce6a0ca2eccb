"""The store's one connection: the file checked and opened, busy waits, and sqlite3's errors as
one-line ``StoreUnavailable`` ("database is locked" never reaches the user)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import anyio

from ..._errors import StoreUnavailable
from .._kit import Backoff, Unavailable, retrying
from .files import check_owner_only, create_owner_only
from .schema import SCHEMA, is_current, upgrade

BUSY_GIVE_UP = 60.0
"""Seconds a transaction keeps retrying a busy database before reporting the store unavailable."""


class Errors(Unavailable):
    """sqlite3's errors as the store's ``StoreUnavailable``, said by what went wrong."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"store {path}")
        self.path = path

    def opening(self, problem: object) -> StoreUnavailable:
        return Unavailable(f"cannot open store {self.path}")(problem)

    def of(self, exc: BaseException) -> StoreUnavailable:
        if not isinstance(exc, sqlite3.Error):
            return super().of(exc)
        text = str(exc)
        if "readonly" in text or "read-only" in text:
            return Unavailable(f"store {self.path} is read-only")(text)
        if "not a database" in text or "malformed" in text:
            return StoreUnavailable(f"store {self.path} is not a tenure database (corrupt?)")
        if "unable to open" in text:
            return self.opening(text)
        return self(text)


def is_busy(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and (
        "locked" in str(exc) or "busy" in str(exc)
    )


def _with_busy_retry(fn: Callable[[], object]) -> None:
    """For the one-time set-up in `connect`, which is sync."""
    give_up = time.monotonic() + BUSY_GIVE_UP
    while True:
        try:
            fn()
            return
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() > give_up:
                raise
            time.sleep(0.005)


def connect(path: Path, errors: Errors) -> sqlite3.Connection:
    """Open the store's file (created owner-only if new) in WAL mode with ``synchronous=FULL``,
    its tables made or upgraded."""
    try:
        with errors.on(sqlite3.Error):
            if path.is_dir():
                raise errors.opening("it is a directory")
            if not path.parent.is_dir():
                raise errors.opening("no such directory")
            check_owner_only(path)
            create_owner_only(path)
            # timeout=0: busy waits happen in `begin`, without blocking the event loop.
            db = sqlite3.connect(path, timeout=0, isolation_level=None, check_same_thread=False)
            _with_busy_retry(lambda: db.execute("PRAGMA journal_mode=WAL"))
            db.execute("PRAGMA synchronous=FULL")
            _with_busy_retry(lambda: db.executescript(SCHEMA))
            if not is_current(db):
                _with_busy_retry(lambda: upgrade(db))
    except StoreUnavailable:
        raise
    except OSError as exc:  # (StoreUnavailable is one too: a ConnectionError)
        raise errors.opening(exc.strerror) from None
    return db


async def begin(db: sqlite3.Connection, errors: Errors) -> None:
    """``BEGIN IMMEDIATE``: take the database's one write lock. A busy database is retried with
    async back-off, so waiting never blocks the loop, for up to `BUSY_GIVE_UP` seconds."""

    async def take() -> None:
        db.execute("BEGIN IMMEDIATE")

    backoff = Backoff(first=0.0001, most=0.005, jitter=False)
    with errors.on(sqlite3.Error):
        await retrying(take, is_busy, backoff, anyio.current_time() + BUSY_GIVE_UP)
