"""A real Redis server (``/usr/bin/redis-server``) on a free loopback port, for tests and chaos.

``RedisServer()`` runs one server in a temporary directory with no persistence (no RDB, no AOF:
a restart loses everything, as a fail-over can). It can stop, kill, pause (SIGSTOP), resume and
start again on the same port; ``replica_of=`` another server makes it an asynchronous replica and
``promote()`` turns it into a primary (``REPLICAOF NO ONE``). With ``faketime=True`` the server
runs under libfaketime reading its offset from a file on every call, so ``clock_jump(seconds)``
moves the server's wall clock (which judges ``PX`` expiry) while it runs. Debian's redis-server
is linked with jemalloc, which libfaketime 0.9.x cannot start (``FAKETIME_CLASH``): ``start()``
then raises ``RuntimeError`` at once rather than hanging.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from .postgres_server import HOST, free_port

REDIS_SERVER = Path(os.environ.get("TENURE_REDIS_SERVER", "/usr/bin/redis-server"))
LIBFAKETIME = Path(
    os.environ.get("TENURE_LIBFAKETIME", "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
)
PREFIX = "tenure-redis-"
FAKETIME_CLASH = (
    "libfaketime cannot run this redis-server: it is linked with jemalloc, whose clock_gettime()"
    " calls during start-up recurse into libfaketime's initialisation (libfaketime issue #130)"
)


class RedisServer:
    """One ``redis-server`` on 127.0.0.1: ``start()``, ``stop()``, ``kill()``, ``close()``."""

    def __init__(
        self,
        *,
        replica_of: RedisServer | None = None,
        faketime: bool = False,
        password: str | None = None,
    ) -> None:
        if not os.access(REDIS_SERVER, os.X_OK):
            raise RuntimeError(f"redis-server not found at {REDIS_SERVER}")
        if faketime and not LIBFAKETIME.exists():
            raise RuntimeError(f"libfaketime not found at {LIBFAKETIME}")
        self.replica_of = replica_of
        self.faketime = faketime
        self.password = password
        self.root = Path(tempfile.mkdtemp(prefix=PREFIX))
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.clock_offset = 0.0
        self._write_offset()

    @classmethod
    def missing(cls) -> list[str]:
        return [] if os.access(REDIS_SERVER, os.X_OK) else [str(REDIS_SERVER)]

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

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # -- life cycle -----------------------------------------------------------------------

    def _argv(self) -> list[str]:
        argv = [
            str(REDIS_SERVER),
            "--port", str(self.port),
            "--bind", HOST,
            "--dir", str(self.root),
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--logfile", str(self.log_path),
        ]  # fmt: skip
        if self.password:
            argv += ["--requirepass", self.password, "--masterauth", self.password]
        if self.replica_of is not None:
            argv += ["--replicaof", HOST, str(self.replica_of.port)]
        return argv

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.faketime:
            env.update(
                LD_PRELOAD=str(LIBFAKETIME),
                FAKETIME_TIMESTAMP_FILE=str(self.root / "faketime"),
                FAKETIME_NO_CACHE="1",
                FAKETIME_DONT_FAKE_MONOTONIC="1",  # only the wall clock (PX expiry) jumps
            )
        return env

    def start(self, timeout: float = 20.0) -> RedisServer:
        """Start (again, on the same port, with no data) and wait until it answers PING."""
        if self.running:
            return self
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self._argv(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env(),
                start_new_session=True,
            )
        self.paused = False
        deadline = time.monotonic() + timeout
        while not self.ping():
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited at start; log: {self.log()}")
            if self.faketime and "libfaketime: Cannot recover" in self.log():
                self.kill()
                raise RuntimeError(FAKETIME_CLASH)
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"redis-server not ready after {timeout}s; log: {self.log()}")
            time.sleep(0.02)
        return self

    def signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL (a crash): with no persistence, everything is gone."""
        if self.proc is None:
            return
        self.signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = None
        self.paused = False

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None:
            return
        if self.paused:
            self.resume()
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        self.proc = None

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.paused = False

    def close(self) -> None:
        try:
            self.kill()
        finally:
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
        """Move the server's wall clock by ``seconds`` more (needs ``faketime=True``)."""
        if not self.faketime:
            raise RuntimeError("clock_jump needs RedisServer(faketime=True)")
        self.clock_offset += seconds
        self._write_offset()

    def _write_offset(self) -> None:
        # libfaketime: "+N" seconds relative to the real clock, re-read on every call.
        path = self.root / "faketime"
        path.write_text(f"{self.clock_offset:+.3f}\n")

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
