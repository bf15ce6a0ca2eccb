"""The examples of docs/no-lock.md (examples/no_lock/) run as written and do what the page
says: one seat sold once, each job's side effect once, one owner per partition, each URL
fetched once, no update lost, one charge per order."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parents[1] / "examples" / "no_lock"


def run(name: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=90,
        env={k: v for k, v in os.environ.items() if k != "TENURE_STORE"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_one_seat_is_sold_once() -> None:
    lines = run("seats.py")
    assert sorted(line.split(": ")[1] for line in lines[:2]) == ["seat 12A is gone", "sold 12A"]
    winner = next(line.split(":")[0] for line in lines[:2] if "sold" in line)
    assert lines[2] == f"seat 12A belongs to {winner}"


def test_each_job_is_handled_once_despite_a_second_delivery() -> None:
    lines = run("jobs_queue.py")
    assert lines[1] == "worker 2: sees None while the job is hidden"
    assert "(replayed)" in lines[2]
    assert lines[-1] == "emails sent: 1; jobs left: 0"


def test_each_partition_has_one_owner() -> None:
    lines = run("partitions.py")
    owned = [line.split(" owns ")[1].split(", ") for line in lines]
    assert len(owned) == 2 and all(len(mine) == 2 for mine in owned)
    assert sorted(owned[0] + owned[1]) == ["p0", "p1", "p2", "p3"]


def test_each_url_is_fetched_once() -> None:
    lines = run("crawl.py")
    assert lines[-1] == "3 fetches for 3 URLs found by 3 crawlers"
    assert len(set(lines[:-1])) == 3


def test_no_update_is_lost() -> None:
    lines = run("lost_updates.py")
    assert sorted(line.split(" after ")[1] for line in lines[:2]) == ["1 tries", "2 tries"]
    assert lines[2] == "balance 130 at version 3: no update lost"
    assert lines[3] == "visits: 3"


@pytest.mark.parametrize("back_end", ["sql", "store"])
def test_a_card_is_charged_once_per_order(back_end: str) -> None:
    lines = run("charge_once.py")
    mine = [line for line in lines if line.startswith(back_end)]
    first, second, refused = mine
    assert first.split(": ")[1] == second.split(": ")[1]  # the retry got the first answer
    assert refused.endswith("refused (KeyReused)")
    assert lines[-1] == "the card was charged 2 times for 2 orders"


def test_the_pages_example_runs_as_written(tmp_path: Path) -> None:
    page = (Path(__file__).parents[1] / "docs" / "no-lock.md").read_text()
    code = page.split("```python\n", 1)[1].split("```", 1)[0]
    env = {**os.environ, "TENURE_STORE": f"sqlite:///{tmp_path}/docs.db"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "{'charge': 'ch_2'}\n"
