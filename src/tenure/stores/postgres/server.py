"""A real PostgreSQL server for tests and for trying tenure, on a free loopback port.

``PostgresServer`` runs one PostgreSQL cluster in a temporary directory. It can be stopped, killed
and started again on the same port and data (for chaos tests); ``close()`` removes everything.

By default anyone on the loopback address may connect as ``postgres`` without a password. Keyword
options make a guarded server instead (for the security tests):

- ``ssl_cert_file`` + ``ssl_key_file`` (+ ``ssl_ca_file``): TLS on, and TCP connections only
  over TLS (``hostssl`` lines, no ``host`` line). The files are copied into the server's own
  directory (the key 0600, as PostgreSQL demands).
- ``client_cert=True``: a client certificate signed by ``ssl_ca_file`` is demanded
  (``clientcert=verify-full``: its common name must be the user name).
- ``password``: ``scram-sha-256`` for every TCP connection, and a login role ``role``
  (``tenure``) with that password, allowed to create schemas in the database ``postgres``.

A guarded server's ``dsn`` names ``role`` (no password, no TLS options: the caller adds them);
the launcher itself talks to it as ``postgres`` over its Unix socket, in an owner-only
directory (``admin_dsn``).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from .._server import HOST, Member, Started, free_port

PG_BIN = Path(os.environ.get("TENURE_PG_BIN", "/usr/local/bin"))
PG_USER = "postgres"  # the system account: PostgreSQL refuses to run as root
PREFIX = "tenure-pg-"
ROLE = "tenure"  # the login role of a guarded server


class PostgresServer(Started):
    """One PostgreSQL cluster: ``start()``, ``stop()`` (fast shutdown), ``kill()``, ``close()``."""

    BINARIES = ("initdb", "pg_ctl", "postgres")

    def __init__(
        self,
        bin_dir: Path = PG_BIN,
        host: str = HOST,
        *,
        ssl_cert_file: Path | None = None,
        ssl_key_file: Path | None = None,
        ssl_ca_file: Path | None = None,
        client_cert: bool = False,
        password: str | None = None,
        role: str = ROLE,
    ) -> None:
        if (ssl_cert_file is None) != (ssl_key_file is None):
            raise ValueError("ssl_cert_file and ssl_key_file go together")
        if ssl_ca_file is not None and ssl_cert_file is None:
            raise ValueError("ssl_ca_file needs ssl_cert_file and ssl_key_file")
        if client_cert and ssl_ca_file is None:
            raise ValueError("client_cert needs ssl_ca_file (the CA of client certificates)")
        self.bin_dir = bin_dir
        self.host = host
        self.ssl_files = {"cert": ssl_cert_file, "key": ssl_key_file, "ca": ssl_ca_file}
        self.client_cert = client_cert
        self.password = password
        self.role = role
        self.port: int | None = None  # chosen at the first start, kept across restarts
        self.root: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    # -- discovery --------------------------------------------------------------------------

    @classmethod
    def missing(cls, bin_dir: Path = PG_BIN) -> list[str]:
        """The PostgreSQL binaries not found in ``bin_dir`` (empty when all are there)."""
        return [b for b in cls.BINARIES if not os.access(bin_dir / b, os.X_OK)]

    @property
    def guarded(self) -> bool:
        """TLS or a password: not the default open server."""
        return self.ssl or self.password is not None

    @property
    def ssl(self) -> bool:
        return self.ssl_files["cert"] is not None

    @property
    def dsn(self) -> str:
        if self.port is None:
            raise RuntimeError("PostgresServer was never started")
        user = self.role if self.guarded else PG_USER
        return f"postgresql://{user}@{self.host}:{self.port}/postgres"

    @property
    def admin_dsn(self) -> str:
        """The superuser over the Unix socket: works whatever TCP demands."""
        if self.port is None or self.root is None:
            raise RuntimeError("PostgresServer was never started")
        sock = self.root / "sock"
        return f"host={sock} port={self.port} user={PG_USER} dbname=postgres"

    @property
    def data_dir(self) -> Path:
        assert self.root is not None
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        assert self.root is not None
        return self.root / "postgres.log"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # -- life cycle -------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> PostgresServer:
        """Start the server (initdb on first use) and wait until it accepts connections."""
        if self.running:
            return self
        if self.root is None:
            self._initdb()
        first = self.port is None
        for _attempt in range(5 if first else 1):
            if first:
                self.port = free_port(self.host)
            try:
                self._launch(timeout)
                return self
            except _PortTaken:
                continue  # someone took the port between free_port() and bind(): try another
        raise RuntimeError(f"postgres could not bind a port on {self.host}; log: {self._log()}")

    def stop(self, timeout: float = 30.0) -> None:
        """Fast shutdown (SIGINT: abort sessions, checkpoint); keeps the data for a restart."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            # runuser forwards SIGINT only to its session, so signal the postmaster directly.
            self._signal_postmaster(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._kill_group()
        self._kill_group()  # leftovers, if any, after the postmaster is gone
        self.proc = None

    def kill(self) -> None:
        """Crash the server: SIGKILL the postmaster and all its backends at once."""
        if self.proc is None:
            return
        self._kill_group()
        self.proc = None

    def pause(self) -> None:
        """Freeze the server (SIGSTOP to the postmaster and every backend): alive but silent."""
        self._signal_group(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_group(signal.SIGCONT)

    def _signal_group(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def close(self) -> None:
        """Stop the server and remove its directory."""
        try:
            self.stop()
        finally:
            if self.root is not None:
                shutil.rmtree(self.root, ignore_errors=True)
                self.root = None

    # -- internals --------------------------------------------------------------------------

    def _as_pg_user(self, argv: list[str]) -> list[str]:
        if os.geteuid() == 0:
            return ["runuser", "-u", PG_USER, "--", *argv]
        return argv

    def _initdb(self) -> None:
        reap_orphans()
        root = Path(tempfile.mkdtemp(prefix=PREFIX))
        self.root = root
        # Whose server this is: a test run killed hard (SIGKILL, pytest-timeout's os._exit)
        # cannot stop its server, so the next run stops it once this process is gone.
        (root / "owner").write_text(str(os.getpid()))
        (root / "sock").mkdir()
        if os.geteuid() == 0:
            pw = pwd.getpwnam(PG_USER)
            for path in (root, root / "sock"):
                os.chown(path, pw.pw_uid, pw.pw_gid)
        argv = [
            str(self.bin_dir / "initdb"),
            "-D",
            str(root / "data"),
            "-U",
            PG_USER,
            "--auth-local=trust",
            "--auth-host=trust",
            "-E",
            "UTF8",
            "--locale=C",
        ]
        done = subprocess.run(
            self._as_pg_user(argv), cwd=root, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed ({done.returncode}): {done.stderr.strip()}")
        if self.guarded:
            self._guard(root)

    def _guard(self, root: Path) -> None:
        """Copy the TLS files where the server can read them, and allow only what was asked."""
        (root / "sock").chmod(0o700)  # the superuser's trusted socket: the server's user only
        if self.ssl:
            (root / "tls").mkdir(mode=0o700)
            for name, source in self.ssl_files.items():
                if source is not None:
                    target = root / "tls" / f"{name}.pem"
                    shutil.copyfile(source, target)
                    target.chmod(0o600)  # the server refuses a key others can read
            self._chown_to_pg_user(root / "tls", *(root / "tls").iterdir())
        method = "trust" if self.password is None else "scram-sha-256"
        lines = ["local all all trust"]
        kind = "hostssl" if self.ssl else "host"
        extra = " clientcert=verify-full" if self.client_cert else ""
        lines.append(f"{kind} all all samehost {method}{extra}")
        (root / "data" / "pg_hba.conf").write_text("\n".join(lines) + "\n")

    def _chown_to_pg_user(self, *paths: Path) -> None:
        if os.geteuid() == 0:
            pw = pwd.getpwnam(PG_USER)
            for path in paths:
                os.chown(path, pw.pw_uid, pw.pw_gid)

    def _launch(self, timeout: float) -> None:
        assert self.root is not None and self.port is not None
        argv = [
            str(self.bin_dir / "postgres"),
            "-D",
            str(self.data_dir),
            "-p",
            str(self.port),
            "-c",
            f"listen_addresses={self.host}",
            "-c",
            f"unix_socket_directories={self.root / 'sock'}",
        ]
        if self.ssl:
            argv += ["-c", "ssl=on"]
            for name, given in self.ssl_files.items():
                if given is not None:
                    argv += ["-c", f"ssl_{name}_file={self.root / 'tls' / f'{name}.pem'}"]
        with open(self.log_path, "ab") as log:
            # A new session: the postmaster and its backends share one process group to kill.
            self.proc = subprocess.Popen(
                self._as_pg_user(argv),
                cwd=self.root,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        import psycopg  # test dependency; imported late so that servers.py imports without it

        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                log = self._log()
                self.proc = None
                if "could not bind" in log or "Address already in use" in log:
                    raise _PortTaken
                raise RuntimeError(f"postgres exited at start; log: {log}")
            try:
                psycopg.connect(self._ready_dsn, connect_timeout=2).close()
                if self.guarded:
                    self._make_role()
                return
            except psycopg.OperationalError as e:
                if time.monotonic() > deadline:
                    self._kill_group()
                    self.proc = None
                    raise RuntimeError(
                        f"postgres not ready after {timeout}s; log: {self._log()}"
                    ) from e
                time.sleep(0.05)

    @property
    def _ready_dsn(self) -> str:
        return self.admin_dsn if self.guarded else self.dsn

    def _make_role(self) -> None:
        """The login role (again after a restart: same result), with the password's SCRAM
        verifier only: the password itself never reaches the server or its log."""
        import psycopg
        from psycopg import sql

        secret = sql.SQL(" PASSWORD {}").format(
            sql.Literal(scram_verifier(self.password)) if self.password is not None else sql.NULL
        )
        role = sql.Identifier(self.role)
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (self.role,))
            verb = sql.SQL("ALTER" if exists.fetchone() else "CREATE")
            conn.execute(sql.SQL("{} ROLE {} LOGIN").format(verb, role) + secret)
            conn.execute(sql.SQL("GRANT CREATE ON DATABASE postgres TO {}").format(role))

    def _postmaster_pid(self) -> int | None:
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def _signal_postmaster(self, sig: signal.Signals) -> None:
        pid = self._postmaster_pid()
        if pid is None or self.proc is None:
            return
        try:
            # Only our own postmaster: it lives in the process group of the process we started.
            if os.getpgid(pid) == self.proc.pid:
                os.kill(pid, sig)
        except ProcessLookupError:
            pass

    def _kill_group(self) -> None:
        if self.proc is None:
            return
        # The postmaster first, so that its parent (runuser, or us) reaps it: killed together
        # with runuser it would be orphaned, and until init reaps it its PID in postmaster.pid
        # still looks alive and blocks a restart ("lock file already exists").
        self._signal_postmaster(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        # Backends notice a dead postmaster on their own; wait for them so a restart does not
        # find the old shared memory still attached.
        deadline = time.monotonic() + 10
        while _group_alive(self.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.02)

    def _log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"


class _PortTaken(Exception):
    pass


def scram_verifier(password: str, iterations: int = 4096) -> str:
    """PostgreSQL's stored form of a SCRAM-SHA-256 password (RFC 5802/7677; an ASCII password
    needs no SASLprep), so that ``CREATE ROLE`` never carries the password itself."""
    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    stored_key = hashlib.sha256(client_key).digest()

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(stored_key)}:{b64(server_key)}"


def _group_alive(pgid: int) -> bool:
    """Whether a live (not zombie) process is left in process group ``pgid`` (Linux /proc)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised command name: state ppid pgrp ...
        fields = stat.rpartition(")")[2].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def reap_orphans() -> None:
    """Stop servers (and remove directories) left behind by test processes that no longer exist."""
    for root in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        try:
            owner = int((root / "owner").read_text())
            os.kill(owner, 0)
            continue  # its owner still runs
        except (PermissionError, ValueError):
            continue  # the owner runs as someone else, or is writing the file right now
        except OSError:
            pass  # no owner file (not ours: skipped below) or the owner is gone
        if not (root / "owner").exists():
            continue
        try:
            pid = int((root / "data" / "postmaster.pid").read_text().split("\n", 1)[0])
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            pid = 0
        if pid and str(root / "data").encode() in cmdline:
            os.kill(pid, signal.SIGQUIT)  # immediate shutdown: nobody needs this data
            deadline = time.monotonic() + 10
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        shutil.rmtree(root, ignore_errors=True)


class PostgresControl:
    """One server: it is its own leader and its own majority."""

    name = "postgres"

    def __init__(self, server: PostgresServer, owned: bool = False) -> None:
        self.server = server
        self.owned = owned

    @property
    def url(self) -> str:
        return self.server.dsn

    def leader(self) -> PostgresControl:
        return self

    def majority(self) -> list[Member]:
        return [self]

    def kill(self) -> None:
        self.server.kill()

    def start(self) -> None:
        self.server.start()

    def pause(self) -> None:
        self.server.pause()

    def resume(self) -> None:
        self.server.resume()

    def restart(self) -> None:
        self.server.stop()
        self.server.start()

    def heal(self) -> None:
        self.server.resume()
        self.server.start()

    def close(self) -> None:
        if self.owned:
            self.server.close()


def launch(members: int | None = None) -> PostgresControl:
    """A throw-away PostgreSQL server (one: ``members`` is ignored), not started yet (the
    registry's ``server``)."""
    return PostgresControl(PostgresServer(), owned=True)
