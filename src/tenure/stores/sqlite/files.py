"""The store's files: where the default one lives, and that they are writable by their owner only.

Whoever can write the database (or its directory: replace the file, plant its ``-wal``) can
forge a lock or lower a token, so tenure refuses such a file instead of trusting it, and makes
its own files owner-only from the start.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import platformdirs

from ..._errors import InvalidArgument

SIDE_FILES = ("-wal", "-shm", "-wake")
"""What SQLite (and the wake-up FIFOs' directory) put beside the database file."""


def default_path() -> Path:
    return platformdirs.user_state_path("tenure") / "locks.db"


def others_can_write(st: os.stat_result) -> str | None:
    """Why someone other than this user (or root) can write what ``st`` describes, or None."""
    if st.st_uid not in (os.geteuid(), 0):
        return f"it is owned by another user (uid {st.st_uid})"
    if st.st_mode & stat.S_IWOTH:
        return "every user can write it"
    if st.st_mode & stat.S_IWGRP:
        return "its group can write it"
    return None


def check_owner_only(path: Path) -> None:
    """Refuse ``path``'s directory, the file and SQLite's side files if others can write them."""
    directory = path.parent
    try:
        why = others_can_write(directory.stat())
    except OSError:
        return  # a missing directory is reported when the store opens the file
    if why:
        raise InvalidArgument(
            f"refusing the store {path}: its directory {directory} is not yours alone ({why});"
            f" whoever can write it can forge a lock. Fix: chmod go-w {directory}, or keep the"
            " store in a directory only you can write (mkdir -m 700)"
        )
    for side in (path, *(path.with_name(path.name + end) for end in SIDE_FILES)):
        try:
            why = others_can_write(side.stat())
        except FileNotFoundError:
            continue
        if why:
            raise InvalidArgument(
                f"refusing the store {path}: {side} is not yours alone ({why}); whoever can"
                f" write it can forge a lock. Fix: chmod go-w {side} (and check who wrote it)"
            )


def create_owner_only(path: Path) -> None:
    """Create the database file if it is not there, owner-only from the start (whatever the
    umask): whoever can write this file can forge a lock."""
    if not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))


def wake_directory(path: Path) -> Path:
    """Where the wake-up FIFOs of the store in ``path`` live."""
    return path.with_name(path.name + "-wake")
