"""A real ZooKeeper ensemble (Debian's ``zookeeper`` package: ``java`` and
``/usr/share/java/zookeeper.jar``) on free loopback ports, for tests and for trying tenure.

``ZooKeeperEnsemble(servers=3)`` writes one ``zoo.cfg`` per server (data in a temporary
directory, under ``data_root`` if given: a RAM disk spares many servers one disk's fsyncs),
starts the JVMs in parallel (each takes a second or more to start) and waits until a quorum
serves; it can stop, kill, pause (SIGSTOP), resume and restart single servers and find the
leader with the ``srvr`` four-letter command (the only ones whitelisted: ``srvr``, ``ruok``; the
AdminServer is disabled). ``close()`` kills everything and removes the directory; a test run
killed hard leaves an owner file behind, and the next run reaps what that run left.

tickTime is 100 ms, so sessions of 0.2 s to 120 s are accepted (a 0.6 s TTL works) and a dead
leader is replaced within about a second.

``ZooKeeperEnsemble(servers=1, tls=ZooKeeperTLS(server_pem, ca, client_auth="need"))`` serves
clients over TLS only: Netty's connection factory on ``secureClientPort``, no plain
``clientPort``, PEM key and trust stores (the key PKCS#8). Debian's zookeeper.jar names only
part of what Netty's TLS needs in its manifest; `tls_classpath` adds the rest. The readiness
check (``srvr``) then goes over TLS too, showing ``probe_cert`` (default: the server's own
certificate, which trustme makes good for client authentication too) when the server demands a
client certificate. Quorum traffic stays plain: it never leaves the loopback.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import ssl
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .._server import HOST, Member, ServerGroup, ServerProcess, free_port, reap_orphans

JAVA = Path(os.environ.get("TENURE_JAVA", "/usr/bin/java"))
ZOOKEEPER_JAR = Path(os.environ.get("TENURE_ZOOKEEPER_JAR", "/usr/share/java/zookeeper.jar"))
# The jar's manifest names its dependencies; slf4j-simple makes its log go to stderr (our file).
CLASSPATH = f"{ZOOKEEPER_JAR}:/usr/share/java/slf4j-simple.jar"
JAVA_LIB = ZOOKEEPER_JAR.parent
NETTY_JARS = (
    # Named by zookeeper.jar's manifest …
    "netty-buffer",
    "netty-common",
    "netty-handler",
    "netty-transport",
    "netty-transport-native-epoll",
    # … and what those need but the manifest leaves out (SslHandler is a codec; the bootstrap
    # resolves addresses; epoll's classes stand on unix-common).
    "netty-codec",
    "netty-resolver",
    "netty-transport-native-unix-common",
)
NETTY_FACTORY = "org.apache.zookeeper.server.NettyServerCnxnFactory"
MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
PREFIX = "tenure-zk-"
TICK_MS = 100
MIN_SESSION_MS = 2 * TICK_MS
MAX_SESSION_MS = 120_000


def tls_classpath() -> str:
    """The classpath of a server with Netty's TLS (every jar checked by `missing`)."""
    return ":".join([CLASSPATH, *(str(JAVA_LIB / f"{jar}.jar") for jar in NETTY_JARS)])


@dataclass(frozen=True)
class ZooKeeperTLS:
    """A TLS-only client port: ``server_pem`` holds the server's PKCS#8 key and certificate,
    ``ca`` the CA(s) whose client certificates it trusts."""

    server_pem: Path
    ca: Path
    client_auth: Literal["need", "want", "none"] = "none"
    probe_cert: Path | None = None
    """Key and certificate the readiness check shows (default ``server_pem``)."""
    server_name: str | None = None
    """The host name the server's certificate names, if not the address it listens on."""

    def config_lines(self) -> list[str]:
        return [
            f"serverCnxnFactory={NETTY_FACTORY}",
            f"ssl.keyStore.location={self.server_pem}",
            "ssl.keyStore.type=PEM",
            f"ssl.trustStore.location={self.ca}",
            "ssl.trustStore.type=PEM",
            f"ssl.clientAuth={self.client_auth}",
        ]

    def probe_context(self) -> ssl.SSLContext:
        """How the launcher itself talks to the server (``srvr``): verified like any client."""
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(str(self.probe_cert or self.server_pem))
        return context


def four_letters(
    endpoint: str,
    command: str,
    timeout: float = 1.0,
    tls: ssl.SSLContext | None = None,
    server_name: str | None = None,
) -> str:
    """Send a four-letter command (``srvr``, ``ruok``) to ``host:port`` (over TLS with ``tls``,
    the server's certificate checked for ``server_name`` or the host); its answer."""
    host, _, port = endpoint.rpartition(":")
    with contextlib.ExitStack() as stack:
        sock = stack.enter_context(socket.create_connection((host, int(port)), timeout=timeout))
        if tls is not None:
            name = server_name or host
            sock = stack.enter_context(tls.wrap_socket(sock, server_hostname=name))
        sock.sendall(command.encode())
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


class ZooKeeperServer(ServerProcess):
    def __init__(self, ensemble: ZooKeeperEnsemble, myid: int) -> None:
        self.ensemble = ensemble
        self.myid = myid
        self.name = f"zk{myid}"
        self.client_port = free_port()
        self.quorum_port = free_port()
        self.election_port = free_port()

    @property
    def endpoint(self) -> str:
        return f"{HOST}:{self.client_port}"

    @property
    def dir(self) -> Path:
        return self.ensemble.root / self.name

    @property
    def log_path(self) -> Path:
        return self.ensemble.root / f"{self.name}.log"

    def write_config(self) -> None:
        data = self.dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        (data / "myid").write_text(f"{self.myid}\n")
        tls = self.ensemble.tls
        if tls is None:
            port = [f"clientPort={self.client_port}", f"clientPortAddress={HOST}"]
        else:  # no clientPort at all: plain connections have nowhere to go
            port = [
                f"secureClientPort={self.client_port}",
                f"secureClientPortAddress={HOST}",
                *tls.config_lines(),
            ]
        lines = [
            f"tickTime={TICK_MS}",
            "initLimit=100",
            "syncLimit=20",
            f"dataDir={data}",
            *port,
            f"minSessionTimeout={MIN_SESSION_MS}",
            f"maxSessionTimeout={MAX_SESSION_MS}",
            "4lw.commands.whitelist=srvr,ruok",
            "admin.enableServer=false",
            "maxClientCnxns=0",
            *self.ensemble.server_lines,
        ]
        (self.dir / "zoo.cfg").write_text("\n".join(lines) + "\n")

    def launch(self) -> None:
        argv = [
            str(JAVA),
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",  # faster start; plenty for tests
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-Dfile.encoding=UTF-8",  # digest credentials beyond ASCII (Java < 18)
            f"-Dtenure.zk.root={self.ensemble.root}",  # lets reap_orphans find us
            "-cp",
            CLASSPATH if self.ensemble.tls is None else tls_classpath(),
            MAIN,
            str(self.dir / "zoo.cfg"),
        ]
        self.spawn(argv, self.log_path)

    def start(self, timeout: float = 60.0) -> None:
        """Start again on the same ports and data (after ``stop`` or ``kill``)."""
        if not self.running:
            self.launch()
        self.wait_ready(timeout)

    def mode(self) -> str | None:
        """'leader', 'follower' or 'standalone' while serving; None otherwise."""
        if not self.running or self.paused:
            return None
        tls = self.ensemble.tls
        context, name = (None, None) if tls is None else (tls.probe_context(), tls.server_name)
        try:
            answer = four_letters(self.endpoint, "srvr", tls=context, server_name=name)
        except OSError:  # ssl.SSLError too: a TLS port not listening yet resets the handshake
            return None
        for line in answer.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None  # "This ZooKeeper instance is not currently serving requests"

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.mode() is None:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper {self.name} exited at start; log: {self.log()}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"ZooKeeper {self.name} not serving after {timeout}s; log: {self.log()}"
                )
            time.sleep(0.05)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"


class ZooKeeperEnsemble(ServerGroup):
    """``servers`` ZooKeeper servers forming one ensemble on 127.0.0.1 (clients over TLS only
    if ``tls`` is given)."""

    def __init__(
        self, servers: int = 3, *, tls: ZooKeeperTLS | None = None, data_root: Path | None = None
    ) -> None:
        self.tls = tls
        missing = self.missing(tls=tls is not None)
        if missing:
            raise RuntimeError(f"not found: {', '.join(missing)}")
        reap_orphans(PREFIX, lambda root: f"-Dtenure.zk.root={root}\0".encode(), data_root)
        self.root = Path(tempfile.mkdtemp(prefix=PREFIX, dir=data_root))
        (self.root / "owner").write_text(str(os.getpid()))
        self.servers = [ZooKeeperServer(self, i + 1) for i in range(servers)]

    @property
    def processes(self) -> list[ZooKeeperServer]:
        return self.servers

    @staticmethod
    def missing(tls: bool = False) -> list[str]:
        needed = [JAVA, ZOOKEEPER_JAR]
        if tls:
            needed += [JAVA_LIB / f"{jar}.jar" for jar in NETTY_JARS]
        return [str(p) for p in needed if not p.exists()]

    @property
    def server_lines(self) -> list[str]:
        return [f"server.{s.myid}={HOST}:{s.quorum_port}:{s.election_port}" for s in self.servers]

    @property
    def endpoints(self) -> list[str]:
        return [s.endpoint for s in self.servers]

    def _launch_all(self, timeout: float) -> None:
        for server in self.servers:
            server.write_config()
        for server in self.servers:
            if not server.running:  # started twice (``with`` and ``start``): one JVM each
                server.launch()
        with ThreadPoolExecutor(len(self.servers)) as pool:
            for done in [pool.submit(s.wait_ready, timeout) for s in self.servers]:
                done.result()

    def start(self, timeout: float = 60.0) -> ZooKeeperEnsemble:
        """Start every server in parallel and wait until all serve (kills all on failure).

        A port taken between ``free_port()`` and the bind: a fresh ensemble on new ports.
        """
        for attempt in range(3):
            try:
                self._launch_all(timeout)
                return self
            except RuntimeError as exc:
                self.kill_all()
                if "Address already in use" not in str(exc) or attempt == 2:
                    raise
                for server in self.servers:
                    shutil.rmtree(server.dir, ignore_errors=True)
                self.servers = [ZooKeeperServer(self, i + 1) for i in range(len(self.servers))]
            except BaseException:
                self.kill_all()
                raise
        raise AssertionError("unreachable")

    def leader(self, timeout: float = 20.0) -> ZooKeeperServer:
        """The server that leads now (waits through an election)."""
        deadline = time.monotonic() + timeout
        while True:
            for server in self.servers:
                if server.mode() in ("leader", "standalone"):
                    return server
            if time.monotonic() > deadline:
                raise RuntimeError(f"no ZooKeeper leader after {timeout}s")
            time.sleep(0.05)

    def healthy(self, timeout: float = 60.0) -> None:
        """Resume, start and wait for every server (after a test that broke some)."""
        for server in self.servers:
            if server.paused:
                server.resume()
        for server in self.servers:
            if not server.running:
                server.launch()
        with ThreadPoolExecutor(len(self.servers)) as pool:
            for done in [pool.submit(s.wait_ready, timeout) for s in self.servers]:
                done.result()


class ZooKeeperControl:
    def __init__(self, ensemble: ZooKeeperEnsemble, owned: bool = False) -> None:
        self.ensemble = ensemble
        self.owned = owned

    @property
    def url(self) -> str:
        return "zookeeper://" + ",".join(self.ensemble.endpoints)

    def start(self) -> None:
        self.ensemble.start()

    def leader(self) -> ZooKeeperServer:
        return self.ensemble.leader()

    def majority(self) -> list[Member]:
        servers = self.ensemble.servers
        return list(servers[: len(servers) // 2 + 1])

    def restart(self) -> None:
        for server in self.ensemble.servers:
            server.stop()
        self.ensemble.healthy()

    def heal(self) -> None:
        self.ensemble.healthy()

    def close(self) -> None:
        if self.owned:
            self.ensemble.close()


def launch(members: int | None = None) -> ZooKeeperControl:
    """A throw-away ZooKeeper ensemble of ``members`` (default 3), not started yet (the
    registry's ``server``)."""
    return ZooKeeperControl(ZooKeeperEnsemble(members or 3), owned=True)
