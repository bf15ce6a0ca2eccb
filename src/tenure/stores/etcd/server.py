"""A real etcd cluster (``/usr/bin/etcd`` members on free loopback ports), for tests and for
trying tenure (``tenure dev-cluster etcd``).

``EtcdCluster(members=3)`` starts a static cluster (data in a temporary directory), waits until
every member answers, and can stop, kill, pause (SIGSTOP), resume and restart single members and
find the leader (``data_root``: where the temporary directory goes, e.g. a RAM disk, so that
members on one host do not queue behind one disk's fsyncs; ``pre_vote``: a member cut off
cannot depose the leader when it comes back with a higher term, as etcd 3.5 does by default;
``heartbeat_ms``/``election_ms``: Raft's timing, etcd's own defaults are 100/1000).
``close()`` kills everything and
removes the directory; a test run killed hard leaves an owner file behind, and the next run
reaps what that run left.

For the security tests: ``EtcdCluster(1, tls=files)`` serves clients over TLS only (https on
127.0.0.1; ``client_cert_auth=True`` also demands a client certificate signed by ``files.ca``;
peers stay plain http on loopback), ``auth_token_ttl`` sets ``--auth-token-ttl`` (seconds a
simple token lives unused; at ``log_level="info"`` etcd logs each token it forgets), and
``enable_auth`` turns on users and roles through the JSON gateway: a root user, and one user
allowed to read and write one key prefix only.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import tempfile
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from .._server import HOST, Member, ServerGroup, ServerProcess, free_port, reap_orphans

if TYPE_CHECKING:
    from .._server import TLSFiles

ETCD = Path(os.environ.get("TENURE_ETCD", "/usr/bin/etcd"))
PREFIX = "tenure-etcd-"
HEARTBEAT_MS = 50
ELECTION_MS = 500
"""Faster than etcd's defaults (100/1000 ms): quicker fail-over, and a 1 s minimum lease TTL."""


class EtcdMember(ServerProcess):
    def __init__(self, cluster: EtcdCluster, index: int) -> None:
        self.cluster = cluster
        self.name = f"m{index}"
        self.client_port = free_port()
        self.peer_port = free_port()

    @property
    def client_url(self) -> str:
        scheme = "https" if self.cluster.tls else "http"
        return f"{scheme}://{HOST}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://{HOST}:{self.peer_port}"

    @property
    def endpoint(self) -> str:
        return f"{HOST}:{self.client_port}"

    @property
    def data_dir(self) -> Path:
        return self.cluster.root / self.name

    @property
    def log_path(self) -> Path:
        return self.cluster.root / f"{self.name}.log"

    def launch(self) -> None:
        argv = [
            str(ETCD),
            f"--name={self.name}",
            f"--data-dir={self.data_dir}",
            f"--listen-client-urls={self.client_url}",
            f"--advertise-client-urls={self.client_url}",
            f"--listen-peer-urls={self.peer_url}",
            f"--initial-advertise-peer-urls={self.peer_url}",
            f"--initial-cluster={self.cluster.initial_cluster}",
            "--initial-cluster-state=new",
            f"--initial-cluster-token={self.cluster.token}",
            f"--heartbeat-interval={self.cluster.heartbeat_ms}",
            f"--election-timeout={self.cluster.election_ms}",
            "--logger=zap",
            f"--log-level={self.cluster.log_level}",
            *(["--pre-vote"] if self.cluster.pre_vote else []),
            *self.cluster.security_flags(),
        ]
        self.spawn(argv, self.log_path)

    def start(self, timeout: float = 30.0) -> None:
        """Start again on the same ports and data (after ``stop`` or ``kill``)."""
        if not self.running:
            self.launch()
        self.wait_ready(timeout)

    def request(
        self, path: str, body: dict[str, object], timeout: float = 2.0
    ) -> dict[str, object]:
        data = json.dumps(body).encode()
        req = urllib.request.Request(self.client_url + path, data=data, method="POST")
        context = self.cluster.client_context()
        with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:
            answer = json.loads(resp.read())
        assert isinstance(answer, dict)
        return answer

    def healthy(self) -> bool:
        try:
            url, context = self.client_url + "/health", self.cluster.client_context()
            with urllib.request.urlopen(url, timeout=1, context=context) as resp:
                return bool(json.loads(resp.read()).get("health") == "true")
        except (OSError, ValueError):
            return False

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"etcd {self.name} exited at start; log: {self.log()}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"etcd {self.name} not ready after {timeout}s; log: {self.log()}"
                )
            time.sleep(0.05)

    def member_id(self) -> str:
        header = self.request("/v3/maintenance/status", {})["header"]
        assert isinstance(header, dict)
        return str(header["member_id"])

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"


class EtcdCluster(ServerGroup):
    """``members`` etcd processes forming one static cluster on 127.0.0.1."""

    def __init__(
        self,
        members: int = 3,
        *,
        tls: TLSFiles | None = None,
        client_cert_auth: bool = False,
        auth_token_ttl: int | None = None,
        log_level: str = "warn",
        data_root: Path | None = None,
        pre_vote: bool = False,
        heartbeat_ms: int = HEARTBEAT_MS,
        election_ms: int = ELECTION_MS,
    ) -> None:
        if client_cert_auth and tls is None:
            raise ValueError("client_cert_auth needs tls")
        self.log_level = log_level
        self.pre_vote = pre_vote
        self.heartbeat_ms, self.election_ms = heartbeat_ms, election_ms
        self.tls = tls
        self.client_cert_auth = client_cert_auth
        self.auth_token_ttl = auth_token_ttl
        if not os.access(ETCD, os.X_OK):
            raise RuntimeError(f"etcd binary not found at {ETCD}")
        reap_orphans(PREFIX, lambda root: f"--data-dir={root}/".encode(), data_root)
        self.root = Path(tempfile.mkdtemp(prefix=PREFIX, dir=data_root))
        (self.root / "owner").write_text(str(os.getpid()))
        self.token = uuid.uuid4().hex
        self.members = [EtcdMember(self, i) for i in range(members)]

    def security_flags(self) -> list[str]:
        """The members' TLS and auth flags (none for a plain cluster)."""
        flags = []
        if self.tls is not None:
            flags += [f"--cert-file={self.tls.server_cert}", f"--key-file={self.tls.server_key}"]
        if self.tls is not None and self.client_cert_auth:
            # A trusted CA alone already makes etcd demand client certificates.
            flags += [f"--trusted-ca-file={self.tls.ca}", "--client-cert-auth"]
        if self.auth_token_ttl is not None:
            flags.append(f"--auth-token-ttl={self.auth_token_ttl}")
        return flags

    def client_context(self) -> ssl.SSLContext | None:
        """What the launcher itself connects with: the CA, and the client certificate."""
        if self.tls is None:
            return None
        context = ssl.create_default_context(cafile=str(self.tls.ca))
        context.load_cert_chain(str(self.tls.client_cert), str(self.tls.client_key))
        return context

    def enable_auth(
        self, user: str, password: str, prefix: str, root_password: str = "root"
    ) -> None:
        """Turn authentication on: ``root`` (all rights, password ``root_password``) and
        ``user``, whose one role grants read and write on keys starting with ``prefix`` only."""
        import httpx

        context = self.client_context()
        key = prefix.encode()
        grant = {
            "key": base64.b64encode(key).decode(),
            "range_end": base64.b64encode(key[:-1] + bytes([key[-1] + 1])).decode(),
            "permType": "READWRITE",
        }
        steps = [
            ("user/add", {"name": "root", "password": root_password}),
            ("role/add", {"name": "root"}),
            ("user/grant", {"user": "root", "role": "root"}),
            ("user/add", {"name": user, "password": password}),
            ("role/add", {"name": user}),
            ("role/grant", {"name": user, "perm": grant}),
            ("user/grant", {"user": user, "role": user}),
            ("enable", {}),
        ]
        with httpx.Client(verify=context if context else True, timeout=10) as http:
            for path, body in steps:
                answer = http.post(f"{self.members[0].client_url}/v3/auth/{path}", json=body)
                if answer.status_code != 200:
                    raise RuntimeError(f"etcd auth/{path} failed: {answer.text}")

    @property
    def initial_cluster(self) -> str:
        return ",".join(f"{m.name}={m.peer_url}" for m in self.members)

    @property
    def endpoints(self) -> list[str]:
        return [m.endpoint for m in self.members]

    @property
    def processes(self) -> list[EtcdMember]:
        return self.members

    def start(self, timeout: float = 30.0) -> EtcdCluster:
        """Start every member in parallel and wait until all are healthy (kills all on failure).

        A port taken between ``free_port()`` and etcd's bind: a fresh cluster on new ports.
        """
        for attempt in range(3):
            try:
                for member in self.members:
                    member.launch()
                with ThreadPoolExecutor(len(self.members)) as pool:
                    for done in [pool.submit(m.wait_ready, timeout) for m in self.members]:
                        done.result()
                return self
            except RuntimeError as exc:
                self.kill_all()
                if "address already in use" not in str(exc) or attempt == 2:
                    raise
                for member in self.members:
                    shutil.rmtree(member.data_dir, ignore_errors=True)
                self.token = uuid.uuid4().hex
                self.members = [EtcdMember(self, i) for i in range(len(self.members))]
            except BaseException:
                self.kill_all()
                raise
        raise AssertionError("unreachable")

    def restart_all(self, timeout: float = 30.0) -> None:
        """Stop every member, then start them all again on the same data."""
        for member in self.members:
            member.stop()
        for member in self.members:
            member.launch()
        with ThreadPoolExecutor(len(self.members)) as pool:
            for done in [pool.submit(m.wait_ready, timeout) for m in self.members]:
                done.result()

    def leader(self, timeout: float = 10.0) -> EtcdMember:
        """The member that is the Raft leader now (waits through an election)."""
        deadline = time.monotonic() + timeout
        while True:
            for member in self.members:
                if not member.running or member.paused:
                    continue
                try:
                    status = member.request("/v3/maintenance/status", {}, timeout=1)
                    header = status["header"]
                    assert isinstance(header, dict)
                except (OSError, ValueError, KeyError):
                    continue
                if status.get("leader") == header.get("member_id"):
                    return member
            if time.monotonic() > deadline:
                raise RuntimeError(f"no etcd leader after {timeout}s")
            time.sleep(0.05)

    def healthy(self) -> None:
        """Resume, start and wait for every member (after a test that broke some)."""
        for member in self.members:
            if member.paused:
                member.resume()
        for member in self.members:
            member.start()


class EtcdControl:
    def __init__(self, cluster: EtcdCluster, owned: bool = False) -> None:
        self.cluster = cluster
        self.owned = owned

    @property
    def url(self) -> str:  # ports may change if the first start found one taken
        return "etcd://" + ",".join(self.cluster.endpoints)

    def start(self) -> None:
        self.cluster.start()

    def leader(self) -> EtcdMember:
        return self.cluster.leader()

    def majority(self) -> list[Member]:
        members = self.cluster.members
        return list(members[: len(members) // 2 + 1])

    def restart(self) -> None:
        self.cluster.restart_all()

    def heal(self) -> None:
        self.cluster.healthy()

    def close(self) -> None:
        if self.owned:
            self.cluster.close()


def launch(members: int | None = None) -> EtcdControl:
    """A throw-away etcd cluster of ``members`` (default 3), not started yet (the registry's
    ``server``: ``tenure chaos --cluster etcd``, ``tenure dev-cluster etcd``)."""
    return EtcdControl(EtcdCluster(members or 3), owned=True)
