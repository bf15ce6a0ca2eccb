"""`tenure chaos` from the command line: exit status 0 without violations, 1 with; one-line
errors for scenarios that cannot run on the store, before anything is started or written."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tenure.chaos import SCENARIOS

if TYPE_CHECKING:
    from conftest import Cli

pytestmark = pytest.mark.timeout(120)


def test_list_names_every_scenario(cli: Cli) -> None:
    done = cli("chaos", "--list")
    assert done.returncode == 0
    listed = [line.split()[0] for line in done.stdout.splitlines()]
    assert listed == list(SCENARIOS)


def test_a_run_without_faults_passes_and_writes_its_files(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = cli(
        "chaos", "--scenario", "smoke", "--seconds", "3", "--ttl", "0.5", "--seed", "3",
        "--json", "--out", str(out), "--store", cli.store,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["passed"] is True
    assert report["violations"] and set(report["violations"].values()) == {0}
    assert report["info"]["seed"] == 3
    assert report["counts"]["grants"] > 3
    assert {p.name for p in out.iterdir()} >= {"report.json", "history.jsonl", "timeline.html"}
    assert json.loads((out / "report.json").read_text())["passed"] is True


def test_the_unfenced_control_exits_1(cli: Cli, tmp_path: Path) -> None:
    done = cli(
        "chaos", "--scenario", "pause", "--unfenced", "--seconds", "7", "--ttl", "0.5",
        "--workers", "4", "--seed", "7", "--out", str(tmp_path / "out"),
        timeout=90,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith("FAIL: ")
    assert "lost-update" in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scenario", "partition"], "needs a networked store"),
        (["--scenario", "leader-kill", "--store", "etcd://127.0.0.1:1"], "--cluster etcd:3"),
        (["--cluster", "etcd:9"], "unknown --cluster 'etcd:9'"),
        (["--store", "sqlite:///x.db", "--cluster", "sqlite"], "not both"),
        (["--ttl", "0"], "--ttl"),
        (["--scenario", "nope"], "'nope' is not one of"),
    ],
)
def test_bad_input_is_one_line_and_leaves_nothing(
    cli: Cli, tmp_path: Path, args: list[str], message: str
) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = cli("chaos", *args, env={**os.environ, "TMPDIR": str(scratch)}, cwd=tmp_path)
    assert done.returncode == 2
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr
    assert list(scratch.iterdir()) == []  # no run directory was made


def test_a_postgres_server_it_starts_itself(cli: Cli, tmp_path: Path) -> None:
    done = cli(
        "chaos", "--cluster", "postgres", "--scenario", "store-restart", "--seconds", "7",
        "--ttl", "0.5", "--workers", "3", "--seed", "1", "--out", str(tmp_path / "out"),
        timeout=100,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"faults: +store-restart [1-9]", done.stdout), done.stdout
