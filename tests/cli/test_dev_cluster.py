"""`tenure dev-cluster`: a real throw-away store for a person to try tenure on."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import Cli


@pytest.mark.parametrize("kind", ["etcd", "postgres"])
def test_dev_cluster_serves_and_cleans_up(cli: Cli, kind: str) -> None:
    proc = cli.start("dev-cluster", kind, "--members", "1")
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    assert url.startswith(("etcd://127.0.0.1:", "postgresql://postgres@127.0.0.1:"))
    ran = cli("run", "try-it", "--store", url, "--", "sh", "-c", "echo $TENURE_TOKEN")
    assert ran.returncode == 0, ran.stderr
    assert int(ran.stdout) >= 1
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0
    assert "stopped and removed" in (proc.stderr.read() if proc.stderr else "")
    port = url.split("127.0.0.1:")[1].split("/")[0].split(",")[0]
    left = subprocess.run(["pgrep", "-f", f"127.0.0.1:{port}"], capture_output=True, text=True)
    assert left.stdout == "", f"server processes left behind: {left.stdout}"


@pytest.mark.parametrize(
    ("kind", "variable"), [("etcd", "TENURE_ETCD"), ("postgres", "TENURE_PG_BIN")]
)
def test_dev_cluster_without_the_server_binaries_is_one_line(
    cli: Cli, kind: str, variable: str, tmp_path: Path
) -> None:
    env = {**os.environ, variable: str(tmp_path / "missing"), "TMPDIR": str(tmp_path)}
    done = cli("dev-cluster", kind, env=env)
    assert done.returncode == 69
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and f"cannot start {kind}" in done.stderr
    assert not list(tmp_path.glob("tenure-*")), "a failed start left files behind"
