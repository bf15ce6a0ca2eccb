"""What every store's server launcher (``tenure.stores.<store>.server``, named by its registry
entry's ``server``) shares: one store server process, as the launchers run it — in a process
group of its own (so a signal reaches its children too), its output appended to a log file, and
the switches a test or the chaos harness flips, kill (a crash), stop (clean), pause and resume
(SIGSTOP/SIGCONT) — free loopback ports, the certificate files a TLS server takes, and the
`ServerControl` its ``launch`` returns to ``tenure chaos`` and ``tenure dev-cluster``."""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from ._registry import StoreEntry

HOST = "127.0.0.1"


def free_port(host: str = HOST) -> int:
    """A TCP port that is free on ``host`` right now (the caller must still handle a lost race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class TLSFiles:
    """The PEM files a launcher's TLS server (and its test clients) use; the tests make them
    (``tenure_tools.certs.make_tls_files``, with trustme)."""

    directory: Path
    ca: Path
    """The CA that signed the server's and the client's certificates."""
    wrong_ca: Path
    """A CA that signed nothing here: verifying the server against it must fail."""
    server_cert: Path
    server_key: Path
    server_pem: Path
    """The server's key and certificate in one file (ZooKeeper's PEM key store)."""
    client_cert: Path
    client_key: Path
    wrong_client_cert: Path
    """A client certificate signed by the wrong CA."""
    wrong_client_key: Path


class Member(Protocol):
    """One server of a throw-away store, as the chaos harness faults it."""

    @property
    def name(self) -> str: ...

    def kill(self) -> None: ...
    def start(self) -> object: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...


class ServerControl(Protocol):
    """A throw-away store's servers, started by ``start()``, reached at ``url``: what a store's
    launcher module's ``launch(members)`` returns (``tenure chaos --cluster``, ``tenure
    dev-cluster``)."""

    @property
    def url(self) -> str: ...

    def start(self) -> None: ...
    def leader(self) -> Member: ...
    def majority(self) -> list[Member]: ...
    def restart(self) -> None: ...
    def heal(self) -> None: ...
    def close(self) -> None: ...


def launch(entry: StoreEntry, members: int | None = None) -> ServerControl:
    """A throw-away server (not started yet) for ``entry``'s store: its launcher module
    (``entry.server``) called with ``members`` (None: the launcher's default)."""
    if entry.server is None:
        raise ValueError(f"no throw-away server for the {entry.key} store")
    module = importlib.import_module(entry.server)
    control: ServerControl = module.launch(members)
    return control


class ServerProcess:
    proc: subprocess.Popen[bytes] | None = None
    paused = False
    group: int | None = None
    """The group id to run as, if set (root only): a `fabric.Fabric` server's."""

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def spawn(self, argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                group=self.group,
                extra_groups=None if self.group is None else [],
            )
        self.paused = False

    def signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL (a crash); what the server keeps on disk stays for a new start."""
        if self.proc is None:
            return
        self.signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = None
        self.paused = False

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (a clean stop), SIGKILL after ``timeout``."""
        if self.proc is None:
            return
        if self.paused:
            self.resume()
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.paused = False


S = TypeVar("S", bound="Started")
G = TypeVar("G", bound="ServerGroup")


class Started:
    """A server (or group) as a context manager: ``with`` starts it, leaving closes it."""

    def start(self: S) -> S:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: S) -> S:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class ServerGroup(Started):
    """Servers sharing one temporary directory ``root`` (with an ``owner`` file naming the test
    process, for ``reap_orphans``): a context manager that starts them all and, on exit or
    ``close()``, kills them and removes the directory."""

    root: Path

    @property
    def processes(self) -> Sequence[ServerProcess]:
        raise NotImplementedError

    def start(self: G, timeout: float = 60.0) -> G:
        raise NotImplementedError

    def kill_all(self) -> None:
        for process in self.processes:
            process.kill()

    def close(self) -> None:
        try:
            self.kill_all()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def ram_disk() -> Path | None:
    """A RAM disk for test servers' data (``/dev/shm``), if this machine has a writable one:
    several members on one host then do not queue behind one disk's fsyncs, which on a busy
    machine stall a 3-member cluster long enough to miss sub-second lease renewals."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else None


def reap_orphans(prefix: str, marker: Callable[[Path], bytes], under: Path | None = None) -> None:
    """Kill the servers (and remove the directories) of test runs that no longer exist: a
    directory ``prefix*`` (in the temporary directory, or ``under``) whose owner process is
    gone; its servers are the processes whose command line contains ``marker(directory)``."""
    for root in Path(under or tempfile.gettempdir()).glob(f"{prefix}*"):
        try:
            owner = int((root / "owner").read_text())
            os.kill(owner, 0)
            continue  # its owner still runs
        except (PermissionError, ValueError):
            continue
        except OSError:
            pass  # no owner file, or the owner is gone
        if not (root / "owner").exists():
            continue
        needle = marker(root)
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                cmdline = Path(entry.path, "cmdline").read_bytes()
            except OSError:
                continue
            if needle in cmdline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(entry.name), signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)
