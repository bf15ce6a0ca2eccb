"""A real Redis server (``/usr/bin/redis-server``) on a free loopback port, for tests and chaos.

``RedisServer()`` runs one server in a temporary directory with no persistence (no RDB, no AOF:
a restart loses everything, as a fail-over can). It can stop, kill, pause (SIGSTOP), resume and
start again on the same port; ``replica_of=`` another server makes it an asynchronous replica and
``promote()`` turns it into a primary (``REPLICAOF NO ONE``). With ``clock_shift=True`` the
server runs under ``clockshift.c`` (an ``LD_PRELOAD`` shim compiled on first use, so it needs a
C compiler) that adds an offset read from a shared 8-byte file to its wall clock only
(``gettimeofday``, ``CLOCK_REALTIME``: what judges ``PX`` expiry; ``CLOCK_MONOTONIC`` is left
alone): ``clock_jump(seconds)`` moves that clock while the server runs.

Security (issue 8): ``tls=TLSFiles`` makes it TLS-only (``--port 0``: no plain port at all;
``tls_auth_clients="yes"`` demands a client certificate signed by the CA, ``"optional"`` takes
one if shown); ``users=[RedisUser(...)]`` adds ACL users and, unless ``password=`` keeps the
default user, switches the default user off. The launcher's own client (health checks,
``command()``) then speaks TLS with the client certificate and logs in as a user of its own
(``launcher``, all keys, a random password), so tests can look at any key.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import ssl
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlencode

from ...testing.proxy import ChaosProxy, ThreadedChaosProxy
from .._clockshift import ClockShift
from .._server import HOST, Member, ServerProcess, Started, TLSFiles, free_port

REDIS_SERVER = Path(os.environ.get("TENURE_REDIS_SERVER", "/usr/bin/redis-server"))
PREFIX = "tenure-redis-"
LAUNCHER_USER = "launcher"


@dataclass(frozen=True)
class RedisUser:
    """An ACL user (Redis 7 ``user`` rule): ``keys`` is its one key pattern, so ``app1:*``
    confines it to the tenure prefix ``app1``; every command is allowed, no Pub/Sub channel."""

    name: str
    password: str
    keys: str = "*"

    def rule(self) -> list[str]:
        # One config line split on spaces by the server: no whitespace inside a part.
        parts = [self.name, "on", f">{self.password}", f"~{self.keys}", "+@all"]
        if any(not part or any(c.isspace() for c in part) for part in parts):
            raise ValueError(f"ACL user {self.name!r}: no empty parts or whitespace")
        return parts


class RedisServer(ServerProcess, Started):
    """One ``redis-server`` on 127.0.0.1: ``start()``, ``stop()``, ``kill()``, ``close()``."""

    def __init__(
        self,
        *,
        replica_of: RedisServer | None = None,
        clock_shift: bool = False,
        password: str | None = None,
        tls: TLSFiles | None = None,
        tls_auth_clients: Literal["yes", "optional", "no"] = "yes",
        users: Sequence[RedisUser] = (),
    ) -> None:
        if not os.access(REDIS_SERVER, os.X_OK):
            raise RuntimeError(f"redis-server not found at {REDIS_SERVER}")
        self.replica_of = replica_of
        self.clock_shift = clock_shift
        self.password = password
        self.tls: TLSFiles | None = tls
        self.tls_auth_clients = tls_auth_clients
        self.users = list(users)
        if replica_of is not None and (tls or users or replica_of.tls or replica_of.users):
            raise ValueError("replication is launched without TLS and ACL users only")
        # With ACL users and no default password, the default user is off: the launcher logs
        # in as a user of its own.
        self.launcher_password = secrets.token_hex(16) if users and not password else None
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
        """A store URL for this server: the default user's password if any, and with TLS the
        CA (and the client certificate when the server demands one) in the query."""
        auth = f":{self.password}@" if self.password else ""
        if self.tls is None:
            return f"redis://{auth}{self.endpoint}/0"
        return f"rediss://{auth}{self.endpoint}/0?{urlencode(self.tls_query())}"

    def tls_query(self) -> dict[str, str]:
        """The ``ca`` (and ``cert``/``key`` when the server demands them) of a store URL."""
        assert self.tls is not None
        query = {"ca": str(self.tls.ca)}
        if self.tls_auth_clients == "yes":
            query.update(cert=str(self.tls.client_cert), key=str(self.tls.client_key))
        return query

    @property
    def log_path(self) -> Path:
        return self.root / "redis.log"

    # -- life cycle -----------------------------------------------------------------------

    def _argv(self) -> list[str]:
        argv = [
            str(REDIS_SERVER),
            *self._port_args(),
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
        if self.launcher_password:
            argv += ["--user", "default", "off"]
            argv += ["--user", *RedisUser(LAUNCHER_USER, self.launcher_password).rule()]
        for user in self.users:
            argv += ["--user", *user.rule()]
        if self.replica_of is not None:
            argv += ["--replicaof", HOST, str(self.replica_of.port)]
        return argv

    def _port_args(self) -> list[str]:
        if self.tls is None:
            return ["--port", str(self.port)]
        return [
            "--port", "0",  # no plain port: TLS only
            "--tls-port", str(self.port),
            "--tls-cert-file", str(self.tls.server_cert),
            "--tls-key-file", str(self.tls.server_key),
            "--tls-ca-cert-file", str(self.tls.ca),
            "--tls-auth-clients", self.tls_auth_clients,
        ]  # fmt: skip

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
        if self.launcher_password:
            parts = [["AUTH", LAUNCHER_USER, self.launcher_password]]
        parts.append(list(args))
        payload = b"".join(
            f"*{len(cmd)}\r\n".encode()
            + b"".join(f"${len(a.encode())}\r\n{a}\r\n".encode() for a in cmd)
            for cmd in parts
        )
        with self._connect(timeout) as sock:
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

    def _connect(self, timeout: float) -> socket.socket:
        sock = socket.create_connection((HOST, self.port), timeout=timeout)
        if self.tls is None:
            return sock
        context = ssl.create_default_context(cafile=str(self.tls.ca))
        context.load_cert_chain(self.tls.client_cert, self.tls.client_key)
        try:
            return context.wrap_socket(sock, server_hostname=HOST)
        except BaseException:
            sock.close()
            raise

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


class RedisControl:
    """A Redis primary and one asynchronous replica, as a small production setup has them.

    Clients reach the primary through a front proxy (one address, like a virtual IP or a
    Sentinel-aware proxy), so a fail-over moves that address to the promoted replica. The replica
    replicates through a proxy too: pausing the replica would not lose writes (they wait in its
    socket buffer), blackholing its link does. ``leader()`` and ``majority()`` are the primary.
    Both servers run with the clock shift, so the primary's clock can jump whichever it is.
    """

    def __init__(self) -> None:
        self.servers: list[RedisServer] = []
        self._front: ThreadedChaosProxy | None = None
        self._link: ThreadedChaosProxy | None = None

    @property
    def primary(self) -> RedisServer:
        return self.servers[0]

    @property
    def replica(self) -> RedisServer:
        return self.servers[1]

    @property
    def front(self) -> ThreadedChaosProxy:
        if self._front is None:
            raise RuntimeError("RedisControl is not started")
        return self._front

    @property
    def link(self) -> ThreadedChaosProxy:
        if self._link is None:
            raise RuntimeError("RedisControl is not started")
        return self._link

    @property
    def url(self) -> str:
        return f"redis://{self.front.address}/0"

    def start(self) -> None:
        try:
            self.servers = [RedisServer(clock_shift=True).start() for _ in range(2)]
            self._front = ChaosProxy(HOST, self.primary.port).start_in_thread()
            self._link = ChaosProxy(HOST, self.primary.port).start_in_thread()
            self._follow(self.replica)
        except BaseException:
            self.close()
            raise

    def _follow(self, server: RedisServer, timeout: float = 10.0) -> None:
        """Make ``server`` replicate the primary through the link proxy, synced when it returns."""
        server.command("REPLICAOF", HOST, str(self.link.port))
        deadline = time.monotonic() + timeout
        while "master_link_status:up" not in server.command("INFO", "replication"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Redis replica did not sync within {timeout}s")
            time.sleep(0.02)

    def cut_replication(self) -> None:
        """Replication stalls (its link blackholed) while clients write on: asynchronous
        replication's lag, made long."""
        self.link.set_mode("blackhole")

    def fail_over(self) -> str:
        """The primary dies (SIGKILL), the replica is promoted and the clients' address moves to
        it: every write since replication stalled is gone. The old primary comes back, empty, as
        the new replica. Returns the promoted server's name."""
        old, new = self.primary, self.replica
        old.kill()
        new.promote()
        self.front.retarget(HOST, new.port)
        self.servers = [new, old]
        self.link.retarget(HOST, new.port)
        self.link.set_mode("pass")
        old.start()
        self._follow(old)
        return new.name

    def clock_jump(self, seconds: float) -> None:
        """The primary's wall clock (the one that expires keys) jumps ``seconds`` forward."""
        self.primary.clock_jump(seconds)

    def leader(self) -> RedisServer:
        """The primary: killed and started again, it comes back empty (no persistence) and its
        replica syncs that emptiness, as an unpersisted Redis does."""
        return self.primary

    def majority(self) -> list[Member]:
        return [self.primary]

    def restart(self) -> None:
        self.primary.stop()
        self.primary.start()

    def heal(self) -> None:
        for server in self.servers:
            if server.paused:
                server.resume()
            server.start()
        self.link.heal()

    def close(self) -> None:
        for proxy in (self._front, self._link):
            if proxy is not None:
                proxy.close()
        for server in self.servers:
            server.close()


def launch(members: int | None = None) -> RedisControl:
    """A throw-away Redis primary with its replica (``members`` is ignored), not started yet
    (the registry's ``server``)."""
    return RedisControl()
