"""`tenure elect` and `tenure leader` with real processes on the embedded store."""

from __future__ import annotations

import json
import signal
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import Cli

pytestmark = pytest.mark.timeout(60)
LEADER_SCRIPT = 'echo "$TENURE_TERM $TENURE_ELECTION" > {out}; echo $$ > {pid}; exec sleep 60'


def test_no_leader_is_exit_1(cli: Cli) -> None:
    done = cli("leader", "sched", "--store", cli.store)
    assert done.returncode == 1
    assert done.stdout.strip() == "sched: no leader"
    done = cli("leader", "sched", "--json", "--store", cli.store)
    assert json.loads(done.stdout) == {"name": "sched", "leader": None}


def test_one_leads_the_other_takes_over_with_a_higher_term(cli: Cli) -> None:
    watcher = cli.start("leader", "sched", "--watch", "--json", "--store", cli.store)
    a = cli.start(
        "elect", "sched", "--value", "host-a", "--store", cli.store, "--ttl", "5", "--",
        "sh", "-c", LEADER_SCRIPT.format(out=cli.tmp / "a.out", pid=cli.tmp / "a.pid"),
    )  # fmt: skip
    a_child = cli.pid_in("a.pid")
    b = cli.start(
        "elect", "sched", "--value", "host-b", "--store", cli.store, "--ttl", "5", "--",
        "sh", "-c", LEADER_SCRIPT.format(out=cli.tmp / "b.out", pid=cli.tmp / "b.pid"),
    )  # fmt: skip
    now = json.loads(cli("leader", "sched", "--json", "--store", cli.store).stdout)
    term_a, election = (cli.tmp / "a.out").read_text().split()
    assert election == "sched"
    assert now["leader"]["value"] == "host-a" and now["leader"]["term"] == int(term_a)
    assert not (cli.tmp / "b.pid").exists(), "only the leader runs the command"
    a.send_signal(signal.SIGTERM)  # forwarded to A's command, which exits; A resigns
    assert a.wait(10) == 128 + signal.SIGTERM
    assert cli.until(lambda: cli.gone(a_child), what="A's command gone")
    cli.pid_in("b.pid")
    term_b = int((cli.tmp / "b.out").read_text().split()[0])
    assert term_b > int(term_a)
    b.send_signal(signal.SIGTERM)
    b.wait(10)
    watcher.send_signal(signal.SIGINT)
    out, _ = watcher.communicate(timeout=10)
    seen = [json.loads(line)["leader"] for line in out.splitlines()]
    values = [(s["term"], s["value"]) for s in seen if s is not None and s["value"]]
    assert (int(term_a), "host-a") in values and (term_b, "host-b") in values
    assert values == sorted(values), "terms in order"


def test_restart_keeps_leading_and_runs_the_command_again(cli: Cli) -> None:
    out = cli.tmp / "runs"
    proc = cli.start(
        "elect", "job", "--restart", "--store", cli.store, "--",
        "sh", "-c", f'echo "$TENURE_TERM" >> {out}; sleep 0.1',
    )  # fmt: skip
    cli.until(lambda: out.exists() and len(out.read_text().split()) >= 3, what="three runs")
    proc.send_signal(signal.SIGTERM)
    proc.wait(10)
    terms = set(out.read_text().split())
    assert len(terms) == 1, "one term for every run"


def test_the_command_exit_code_is_passed_through_and_it_resigns(cli: Cli) -> None:
    done = cli("elect", "once", "--store", cli.store, "--", "sh", "-c", "exit 7")
    assert done.returncode == 7
    assert cli("leader", "once", "--store", cli.store).returncode == 1


def test_bad_value_is_one_line(cli: Cli) -> None:
    done = cli("elect", "x", "--value", "a\x01" * 3000, "--store", cli.store, "--", "true")
    assert done.returncode == 2
    assert "at most 4096 characters" in cli.one_error_line(done.stderr)


@pytest.mark.parametrize("store", ["postgres", "etcd"])
def test_elect_and_leader_on_networked_stores(
    cli: Cli, store: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue(f"{store}_store_url")
    watcher = cli.start("leader", "net", "--watch", "--json", "--store", url)
    proc = cli.start(
        "elect", "net", "--value", f"on-{store}", "--store", url, "--",
        "sh", "-c", f"echo $$ > {cli.tmp / 'pid'}; exec sleep 60",
    )  # fmt: skip
    cli.pid_in("pid")
    now = json.loads(cli("leader", "net", "--json", "--store", url).stdout)["leader"]
    assert now["value"] == f"on-{store}"
    proc.send_signal(signal.SIGTERM)
    proc.wait(10)
    assert cli("leader", "net", "--store", url).returncode == 1  # resigned
    watcher.send_signal(signal.SIGINT)
    out, _ = watcher.communicate(timeout=10)
    seen = [json.loads(line)["leader"] for line in out.splitlines()]
    assert any(s and s["value"] == f"on-{store}" for s in seen)
