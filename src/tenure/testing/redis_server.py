"""A real Redis server (``/usr/bin/redis-server``) on a free loopback port, for tests and chaos.

``RedisServer()`` runs one server in a temporary directory with no persistence (no RDB, no AOF:
a restart loses everything, as a fail-over can). It can stop, kill, pause (SIGSTOP), resume and
start again on the same port; ``replica_of=`` another server makes it an asynchronous replica and
``promote()`` turns it into a primary (``REPLICAOF NO ONE``). With ``clock_shift=True`` the
server runs under ``clockshift.c`` (an ``LD_PRELOAD`` shim compiled on first use, so it needs a
C compiler) that adds an offset read from a shared 8-byte file to its wall clock only
(``gettimeofday``, ``CLOCK_REALTIME``: what judges ``PX`` expiry; ``CLOCK_MONOTONIC`` is left
alone): ``clock_jump(seconds)`` moves that clock while the server runs.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from pathlib import Path
from types import TracebackType

from ._process import ServerProcess
from .clockshift import ClockShift
from .postgres_server import HOST, free_port

REDIS_SERVER = Path(os.environ.get("TENURE_REDIS_SERVER", "/usr/bin/redis-server"))
PREFIX = "tenure-redis-"


class RedisServer(ServerProcess):
    """One ``redis-server`` on 127.0.0.1: ``start()``, ``stop()``, ``kill()``, ``close()``."""

    def __init__(
        self,
        *,
        replica_of: RedisServer | None = None,
        clock_shift: bool = False,
        password: str | None = None,
    ) -> None:
        if not os.access(REDIS_SERVER, os.X_OK):
            raise RuntimeError(f"redis-server not found at {REDIS_SERVER}")
        self.replica_of = replica_of
        self.clock_shift = clock_shift
        self.password = password
        self.root = Path(tempfile.mkdtemp(prefix=PREFIX))
        self.port = free_port()
        self.clock = ClockShift(self.root / "clock-offset") if clock_shift else None

    @classmethod
    def missing(cls) -> list[str]:
        return [] if os.access(REDIS_SERVER, os.X_OK) else [str(REDIS_SERVER)]

    @property
    def name(self) -> str:
        return f"redis:{self.port}"

    @property
    def endpoint(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}{self.endpoint}/0"

    @property
    def log_path(self) -> Path:
        return self.root / "redis.log"

    # -- life cycle -----------------------------------------------------------------------

    def _argv(self) -> list[str]:
        argv = [
            str(REDIS_SERVER),
            "--port", str(self.port),
            "--bind", HOST,
            "--dir", str(self.root),
            "--save", "",
            "--appendonly", "no",
            "--repl-diskless-sync-delay", "0",  # a replica syncs at once (default: 5 s later)
            "--daemonize", "no",
            "--logfile", str(self.log_path),
        ]  # fmt: skip
        if self.password:
            argv += ["--requirepass", self.password, "--masterauth", self.password]
        if self.replica_of is not None:
            argv += ["--replicaof", HOST, str(self.replica_of.port)]
        return argv

    def _env(self) -> dict[str, str]:
        return dict(os.environ) if self.clock is None else self.clock.env()

    def start(self, timeout: float = 20.0) -> RedisServer:
        """Start (again, on the same port, with no data) and wait until it answers PING."""
        if self.running:
            return self
        self.spawn(self._argv(), self.log_path, self._env())
        deadline = time.monotonic() + timeout
        while not self.ping():
            if not self.running:
                raise RuntimeError(f"redis-server exited at start; log: {self.log()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"redis-server not ready after {timeout}s; log: {self.log()}")
            time.sleep(0.02)
        return self

    def close(self) -> None:
        try:
            self.kill()
        finally:
            if self.clock is not None:
                self.clock.close()
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- replication and clock ------------------------------------------------------------

    def promote(self) -> None:
        """Make this replica a primary (``REPLICAOF NO ONE``): a fail-over."""
        self.command("REPLICAOF", "NO", "ONE")
        self.replica_of = None

    def clock_jump(self, seconds: float) -> None:
        """Move the server's wall clock by ``seconds`` more, at once (needs ``clock_shift=True``);
        its monotonic clock does not move."""
        if self.clock is None:
            raise RuntimeError("clock_jump needs RedisServer(clock_shift=True)")
        self.clock.jump(seconds)

    # -- a tiny client (no dependency on redis-py here) -------------------------------------

    def command(self, *args: str, timeout: float = 2.0) -> str:
        """Send one command (RESP); its reply as text (an error reply raises RuntimeError)."""
        parts = [] if not self.password else [["AUTH", self.password]]
        parts.append(list(args))
        payload = b"".join(
            f"*{len(cmd)}\r\n".encode()
            + b"".join(f"${len(a.encode())}\r\n{a}\r\n".encode() for a in cmd)
            for cmd in parts
        )
        with socket.create_connection((HOST, self.port), timeout=timeout) as sock:
            sock.sendall(payload)
            reader = sock.makefile("rb")
            line = b""
            for _ in parts:
                line = reader.readline().rstrip(b"\r\n")
                if line.startswith(b"-"):
                    raise RuntimeError(f"redis: {line[1:].decode(errors='replace')}")
                if line.startswith(b"$") and line != b"$-1":
                    line = reader.read(int(line[1:]) + 2)[:-2]
        return line.decode(errors="replace").lstrip("+:")

    def ping(self) -> bool:
        try:
            return self.command("PING", timeout=0.5) == "PONG"
        except (OSError, RuntimeError):
            return False

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"
