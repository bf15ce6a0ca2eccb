"""A real ZooKeeper ensemble (Debian's ``zookeeper`` package: ``java`` and
``/usr/share/java/zookeeper.jar``) on free loopback ports, for tests and for trying tenure.

``ZooKeeperEnsemble(servers=3)`` writes one ``zoo.cfg`` per server (data in a temporary
directory), starts the JVMs in parallel (each takes a second or more to start) and waits until a
quorum serves; it can stop, kill, pause (SIGSTOP), resume and restart single servers and find the
leader with the ``srvr`` four-letter command (the only ones whitelisted: ``srvr``, ``ruok``; the
AdminServer is disabled). ``close()`` kills everything and removes the directory; a test run
killed hard leaves an owner file behind, and the next run reaps what that run left.

tickTime is 100 ms, so sessions of 0.2 s to 120 s are accepted (a 0.6 s TTL works) and a dead
leader is replaced within about a second.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ._process import ServerGroup, ServerProcess, reap_orphans
from .postgres_server import HOST, free_port

JAVA = Path(os.environ.get("TENURE_JAVA", "/usr/bin/java"))
ZOOKEEPER_JAR = Path(os.environ.get("TENURE_ZOOKEEPER_JAR", "/usr/share/java/zookeeper.jar"))
# The jar's manifest names its dependencies; slf4j-simple makes its log go to stderr (our file).
CLASSPATH = f"{ZOOKEEPER_JAR}:/usr/share/java/slf4j-simple.jar"
MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
PREFIX = "tenure-zk-"
TICK_MS = 100
MIN_SESSION_MS = 2 * TICK_MS
MAX_SESSION_MS = 120_000


def four_letters(endpoint: str, command: str, timeout: float = 1.0) -> str:
    """Send a four-letter command (``srvr``, ``ruok``) to ``host:port``; its answer."""
    host, _, port = endpoint.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
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
        lines = [
            f"tickTime={TICK_MS}",
            "initLimit=100",
            "syncLimit=20",
            f"dataDir={data}",
            f"clientPort={self.client_port}",
            f"clientPortAddress={HOST}",
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
            f"-Dtenure.zk.root={self.ensemble.root}",  # lets reap_orphans find us
            "-cp",
            CLASSPATH,
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
        try:
            answer = four_letters(self.endpoint, "srvr")
        except OSError:
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
    """``servers`` ZooKeeper servers forming one ensemble on 127.0.0.1."""

    def __init__(self, servers: int = 3) -> None:
        missing = self.missing()
        if missing:
            raise RuntimeError(f"not found: {', '.join(missing)}")
        reap_orphans(PREFIX, lambda root: f"-Dtenure.zk.root={root}\0".encode())
        self.root = Path(tempfile.mkdtemp(prefix=PREFIX))
        (self.root / "owner").write_text(str(os.getpid()))
        self.servers = [ZooKeeperServer(self, i + 1) for i in range(servers)]

    @property
    def processes(self) -> list[ZooKeeperServer]:
        return self.servers

    @staticmethod
    def missing() -> list[str]:
        return [str(p) for p in (JAVA, ZOOKEEPER_JAR) if not p.exists()]

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
