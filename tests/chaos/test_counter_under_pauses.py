"""Many real processes increment a counter through the lock while holders are paused past their
TTL (SIGSTOP) and killed (SIGKILL). With fencing, nothing is lost and no stale token is admitted;
without it, the same run loses updates — so the checker is known to bite."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import tenure
from tenure.testing.workloads import check_counter, make_counter

WORKER = ["-m", "tenure.testing.workloads.counter"]
WORKERS = 4
TTL = 0.5
SECONDS = 7.0


def run_workload(tmp_path: Path, mode: str, store: str) -> tuple[list[str], int, int]:
    resource = str(tmp_path / "resource.db")
    make_counter(resource)
    argv = [sys.executable, *WORKER, store, resource, mode, str(SECONDS), str(TTL)]
    outputs: list[str] = []
    procs: list[subprocess.Popen[str]] = []

    def spawn() -> subprocess.Popen[str]:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        reader = threading.Thread(target=lambda: outputs.extend(proc.stdout or []), daemon=True)
        reader.start()
        return proc

    live = [spawn() for _ in range(WORKERS)]
    rng = random.Random(7)
    # A nemesis event every ~0.3 s: three pauses of a holder, then a crash, and again.
    pauses = kills = 0
    end = time.monotonic() + SECONDS - 1.0
    try:
        with tenure.connect(store) as observer:
            while time.monotonic() < end:
                time.sleep(rng.uniform(0.1, 0.4))
                holders = observer.locks("counter")
                if not holders:
                    continue
                victim = next((p for p in live if p.pid == holders[0].owner.pid), None)
                if victim is None:
                    continue
                if (pauses + kills) % 4 != 3:  # pause the holder past its lease, then resume it
                    victim.send_signal(signal.SIGSTOP)
                    time.sleep(rng.uniform(1.2, 2.5) * TTL)
                    victim.send_signal(signal.SIGCONT)
                    pauses += 1
                else:  # crash the holder and start a replacement
                    victim.kill()
                    victim.wait()
                    live.remove(victim)
                    live.append(spawn())
                    kills += 1
        for proc in live:
            proc.wait(timeout=SECONDS + 30)
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
    time.sleep(0.2)  # let the readers drain
    return outputs, pauses, kills


@pytest.mark.timeout(90)
@pytest.mark.parametrize("store", ["sqlite", "postgres", "etcd"])
def test_fenced_counter_loses_nothing(
    tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue(f"{store}_store_url")
    outputs, pauses, kills = run_workload(tmp_path, "fenced", url)
    assert kills >= 1, "the nemesis must actually have crashed a holder"
    report = check_counter(str(tmp_path / "resource.db"))
    assert pauses >= 3, "the nemesis must actually have paused holders"
    assert report.violations == []
    acked = [line for line in outputs if line.startswith("ok ")]
    assert report.accepted >= len(acked) > 10
    refused = [line for line in outputs if line.startswith(("refused", "lost"))]
    assert refused, "paused holders must have been refused or told they lost"


@pytest.mark.timeout(90)
def test_unfenced_counter_shows_lost_updates(tmp_path: Path, sqlite_store_url: str) -> None:
    """The positive control: the same run without fencing must show the violation."""
    _, pauses, _ = run_workload(tmp_path, "unfenced", sqlite_store_url)
    report = check_counter(str(tmp_path / "resource.db"))
    assert pauses >= 3
    assert report.lost_updates, "without fencing, pauses past the lease must lose updates"
