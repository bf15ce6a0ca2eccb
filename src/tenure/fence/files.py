"""A fence for whole files in a shared directory (``tenure.fence.FileFence``), Linux and macOS.

The holder's token is checked against a small record of the highest token accepted for the file,
kept beside it, and the file is replaced whole and atomically — under an OS lock (``flock``)
that every cooperating writer takes, so that no check and replace of one writer falls between
another's::

    fence = FileFence("/srv/shared/reports")
    # The holder got `lease` from a tenure lock and sends lease.token along with its write:
    fence.write("daily.csv", lease.token, rows)      # StaleToken if a newer one was seen
    data = fence.read("daily.csv", lease.token)       # admits the token, then reads

Beside ``NAME`` the fence keeps ``.NAME.tenure-token`` (the highest token, a decimal line) and
``.NAME.tenure-lock`` (the lock file, never removed); a write goes through a temporary
``.NAME.<16 hex>.tenure-tmp`` in the same directory, which the next write removes if a crash
left it. Names of fenced files are plain names in the directory, not starting with a dot.

The fence is only as good as the file system's ``rename`` and ``flock``: sound on a local file
system, not on NFSv3, SMB or an object store mounted through FUSE (docs/fencing-files.md).
A writer that does not use the fence is not stopped by it.
"""

from __future__ import annotations

import fcntl
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .._errors import InvalidArgument, TenureError
from ._tokens import MAX_TOKEN, check, refused

__all__ = ["FileFence"]

_TOKEN = ".tenure-token"
_LOCK = ".tenure-lock"
_TEMP = ".tenure-tmp"
_TEMP_HEX = 16
_LONGEST = 255 - len("..") - _TEMP_HEX - len(_TEMP)
"""The longest name in bytes whose temporary file still fits a 255-byte file name."""


class FileFence:
    """Fenced writes and reads of whole files in one directory.

    Equal tokens are admitted (one lease writes many times), a higher one is admitted and kept,
    a lower one raises ``tenure.StaleToken`` and leaves the file byte for byte as it was.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        path = Path(directory)
        if not path.is_dir():
            raise InvalidArgument(f"fence directory {str(directory)!r} is not a directory")
        self.directory = path

    def __repr__(self) -> str:
        return f"FileFence({str(self.directory)!r})"

    def write(self, name: str, token: int, data: bytes | str) -> None:
        """Replace the file ``name`` with ``data`` (``str`` as UTF-8) if ``token`` is admitted,
        else raise `StaleToken`. Readers see the old file or the new one, never a part.

        The token is kept before the file is replaced: a write that fails half way (a crash, a
        full disk) leaves the token admitted and the file as it was.
        """
        _check(name, token)
        if isinstance(data, str):
            data = data.encode()
        elif not isinstance(data, bytes):
            raise InvalidArgument(f"file data must be bytes or str, not {type(data).__name__}")
        with self._locked(name):
            self._remove_temporaries(name)
            self._admit(name, token)
            target = self.directory / name
            try:
                mode = os.stat(target).st_mode & 0o7777
            except FileNotFoundError:
                mode = None
            self._replace(name, target, data, mode)

    def read(self, name: str, token: int) -> bytes:
        """Admit ``token`` (or raise `StaleToken`), then read the file ``name``; admitting
        first means no older holder writes it after this read. ``FileNotFoundError`` if there
        is no such file yet (the token is admitted all the same)."""
        _check(name, token)
        with self._locked(name):
            self._admit(name, token)
            return (self.directory / name).read_bytes()

    def admit(self, name: str, token: int) -> None:
        """Admit ``token`` for the file ``name`` (and keep it if higher) or raise `StaleToken`."""
        _check(name, token)
        with self._locked(name):
            self._admit(name, token)

    def highest(self, name: str) -> int | None:
        """The highest token admitted for the file ``name``; None before the first."""
        _check(name, 0)
        with self._locked(name):
            return self._highest(name)

    # -- under the file's lock --------------------------------------------------------------

    @contextmanager
    def _locked(self, name: str) -> Iterator[None]:
        fd = os.open(
            self.directory / f".{name}{_LOCK}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666
        )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd closes, or when the process dies
            yield
        finally:
            os.close(fd)

    def _highest(self, name: str) -> int | None:
        record = self.directory / f".{name}{_TOKEN}"
        try:
            text = record.read_text(encoding="ascii", errors="replace").strip()
        except FileNotFoundError:
            return None
        if not text.isdigit() or int(text) > MAX_TOKEN:
            # Written only whole by rename, so this is someone else's doing: refuse every write.
            raise TenureError(f"fence record {record} does not hold a fencing token: {text!r}")
        return int(text)

    def _admit(self, name: str, token: int) -> None:
        highest = self._highest(name)
        if highest is not None and token < highest:
            raise refused("FileFence", name, token, highest)
        if highest != token:
            record = self.directory / f".{name}{_TOKEN}"
            self._replace(name, record, f"{token}\n".encode(), None)

    def _replace(self, name: str, target: Path, data: bytes, mode: int | None) -> None:
        """Write a temporary file beside ``target``, flush it to disk, rename it over ``target``
        and flush the directory: ``target`` is the old file or the new one, even after a crash."""
        temp = self.directory / f".{name}.{secrets.token_hex(_TEMP_HEX // 2)}{_TEMP}"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        try:
            try:
                if mode is not None:
                    os.fchmod(fd, mode)  # keep the replaced file's permissions
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, target)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        _sync_directory(self.directory)

    def _remove_temporaries(self, name: str) -> None:
        """Remove the temporary files of ``name`` a crashed writer left: under the lock, no
        writer of ``name`` has one open."""
        head = f".{name}."
        with os.scandir(self.directory) as entries:
            for entry in entries:
                found = entry.name
                if not (found.startswith(head) and found.endswith(_TEMP)):
                    continue
                middle = found[len(head) : -len(_TEMP)]
                # Hex has no dot, so another name's temporary (".a.b.<hex>") never matches ".a.".
                if len(middle) == _TEMP_HEX and all(c in "0123456789abcdef" for c in middle):
                    Path(entry.path).unlink(missing_ok=True)


def _check(name: str, token: int) -> None:
    check(name, token)  # first: a name that is no string is refused here
    if "/" in name or name.startswith(".") or len(os.fsencode(name)) > _LONGEST:
        raise InvalidArgument(
            f"fenced file name must be a plain name in the directory, not starting with a dot, "
            f"at most {_LONGEST} bytes: not {name!r}"
        )


def _sync_directory(directory: Path) -> None:
    """Flush the directory's entries, so a rename in it survives a crash of the machine."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
