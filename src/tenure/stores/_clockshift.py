"""Shift a process's wall clock: ``clockshift.c``, an ``LD_PRELOAD`` shim built on first use.

The shim adds an offset, read from a shared 8-byte file on every call, to ``CLOCK_REALTIME`` and
``gettimeofday``/``time`` only; monotonic clocks are left alone. A ``ClockShift`` owns that file:
start a process with ``env=shift.env()`` and move its clock with ``shift.set(seconds)`` (or
``jump``) while it runs. Used for Redis (whose key expiry follows its wall clock) and for
``tenure cron`` servers whose clocks disagree. Needs a C compiler (cc or gcc).
"""

from __future__ import annotations

import hashlib
import mmap
import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

CLOCKSHIFT_SOURCE = Path(__file__).with_name("clockshift.c")
CLOCKSHIFT_FILE = "TENURE_CLOCKSHIFT_FILE"  # the variable clockshift.c reads the path from


def clockshift_library() -> Path:
    """``clockshift.c`` built as a shared object, once per user and source version.

    Kept in a per-user temporary directory under the source's hash; built under a private name
    and renamed into place, so parallel test processes never load a half-written file."""
    source = CLOCKSHIFT_SOURCE.read_bytes()
    cache = Path(tempfile.gettempdir()) / f"tenure-{os.getuid()}"
    cache.mkdir(mode=0o700, exist_ok=True)
    if cache.stat().st_uid != os.getuid() or cache.is_symlink():
        raise RuntimeError(f"{cache} belongs to someone else: cannot build clockshift there")
    target = cache / f"clockshift-{hashlib.sha256(source).hexdigest()[:16]}.so"
    if target.exists():
        return target
    compiler = next((c for c in (os.environ.get("CC"), "cc", "gcc") if c and shutil.which(c)), None)
    if compiler is None:
        raise RuntimeError("clock_shift needs a C compiler (cc or gcc) to build clockshift.c")
    partial = cache / f".{target.name}.{os.getpid()}.tmp"
    try:
        subprocess.run(
            [compiler, "-shared", "-fPIC", "-O2", "-o", str(partial), str(CLOCKSHIFT_SOURCE)],
            check=True,
            capture_output=True,
        )
        os.replace(partial, target)
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"{compiler} failed on clockshift.c: {exc.stderr.decode()}") from exc
    finally:
        partial.unlink(missing_ok=True)
    return target


class ClockShift:
    """The offset file of one or more shifted processes (created at 0 seconds)."""

    def __init__(self, path: Path, seconds: float = 0.0) -> None:
        self.path = path
        self.library = clockshift_library()
        with open(path, "w+b") as file:
            file.write(bytes(8))
            file.flush()
            # Written through the same shared pages the processes map: an aligned 8-byte store,
            # so a process never reads half an offset.
            self._map: mmap.mmap | None = mmap.mmap(file.fileno(), 8)
        self.seconds = 0.0
        self.set(seconds)

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) with the shim preloaded."""
        env = dict(os.environ if base is None else base)
        preload = env.get("LD_PRELOAD")
        env["LD_PRELOAD"] = f"{self.library} {preload}" if preload else str(self.library)
        env[CLOCKSHIFT_FILE] = str(self.path)
        return env

    def set(self, seconds: float) -> None:
        """The shifted clocks run ``seconds`` ahead of the real one (behind if negative)."""
        if self._map is None:
            raise RuntimeError("this ClockShift is closed")
        self.seconds = seconds
        self._map[:] = struct.pack("=q", round(seconds * 1e9))

    def jump(self, seconds: float) -> None:
        self.set(self.seconds + seconds)

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
