"""`tenure partitions GROUP`: the map of a partition group, read from real member processes on
the embedded store; and `read_map`, the reading itself, without a store."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Any

import pytest

from tenure import Holder, LockInfo
from tenure._partitions import assign
from tenure.cli.partitions import read_map

if TYPE_CHECKING:
    from conftest import Cli

pytestmark = pytest.mark.timeout(90)
GROUP = "orders"
ITEMS = [f"i{n}" for n in range(8)]
WEIGHTS = {"alpha": 2.0, "beta": 1.0}
EXPECTED = assign(ITEMS, WEIGHTS)  # who owns what once both members have settled

# Two members in one process, each with its own client (so its own session and label): "ready"
# once each owns exactly its share and both agree on the group; a line on stdin makes beta
# leave ("left" once alpha owns everything), a second line ends it.
MEMBERS = """
import sys, time
import tenure

url, group, items = sys.argv[1], sys.argv[2], sys.argv[3].split(",")


def settle(*members):
    def settled():
        views = [m.assignment() for m in members]
        return all(
            len(m.members) == len(members) and view == views[0]
            and set(m.owned) == {i for i, owner in view.items() if owner == m.id}
            for m, view in zip(members, views)
        )

    while not settled():
        time.sleep(0.05)


with tenure.connect(url, label="a") as ca, tenure.connect(url, label="b") as cb:
    with ca.partitions(group, items, ttl=10, member="alpha", weight=2) as a:
        with cb.partitions(group, items, ttl=10, member="beta", weight=1) as b:
            settle(a, b)
            print("ready", flush=True)
            sys.stdin.readline()
        settle(a)
        print("left", flush=True)
        sys.stdin.readline()
"""


class Lines:
    """A process's stdout, line by line, each waited for at most ``timeout`` seconds (a guard
    against a hang, not a measure of speed)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                self._lines.put(line.rstrip("\n"))
        except (OSError, ValueError):  # closed by the fixture's clean-up
            pass

    def next(self, timeout: float = 30) -> str:
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no line within {timeout}s")


@pytest.fixture
def members(cli: Cli) -> tuple[subprocess.Popen[str], Lines]:
    assert set(EXPECTED.values()) == set(WEIGHTS), "both members own some items"
    proc = subprocess.Popen(
        [sys.executable, "-c", MEMBERS, cli.store, GROUP, ",".join(ITEMS)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    cli.started.append(proc)  # killed at the end of the test, whatever happens
    lines = Lines(proc)
    assert lines.next(60) == "ready"
    return proc, lines


def owners(data: dict[str, Any]) -> dict[str, Any]:
    return {entry["item"]: entry["member"] for entry in data["items"]}


def test_the_map_as_text_and_json(cli: Cli, members: tuple[subprocess.Popen[str], Lines]) -> None:
    proc = members[0]
    done = cli("partitions", GROUP, "--store", cli.store)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    head, *rest = done.stdout.splitlines()
    assert head == f"{GROUP}: 2 members, {len(ITEMS)} items owned"
    blank = rest.index("")
    member_rows, item_rows = rest[:blank], rest[blank + 1 :]
    assert member_rows[0].split() == ["MEMBER", "WEIGHT", "HOLDER", "EXPIRES"]
    assert member_rows[1].split()[:2] == ["alpha", "2"] and f"pid {proc.pid} (a)" in member_rows[1]
    assert member_rows[2].split()[:2] == ["beta", "1"] and f"pid {proc.pid} (b)" in member_rows[2]
    assert item_rows[0].split() == ["ITEM", "MEMBER", "TOKEN", "EXPIRES"]
    shown = {row.split()[0]: row.split()[1] for row in item_rows[1:]}
    assert [row.split()[0] for row in item_rows[1:]] == ITEMS, "every item once, sorted"
    assert shown == EXPECTED
    assert all(row.split()[2].isdigit() and row.endswith("s") for row in item_rows[1:])

    done = cli("partitions", GROUP, "--json", "--store", cli.store)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["group"] == GROUP
    assert [(m["id"], m["weight"], m["pid"], m["label"]) for m in data["members"]] == [
        ("alpha", 2.0, proc.pid, "a"),
        ("beta", 1.0, proc.pid, "b"),
    ]
    assert all(isinstance(m["host"], str) and 0 < m["expires_in"] <= 10 for m in data["members"])
    assert [entry["item"] for entry in data["items"]] == ITEMS
    assert owners(data) == EXPECTED
    assert all(entry["token"] >= 1 and 0 < entry["expires_in"] <= 10 for entry in data["items"])


def test_watch_prints_a_new_map_when_a_member_leaves(
    cli: Cli, members: tuple[subprocess.Popen[str], Lines]
) -> None:
    proc, said = members
    watcher = cli.start("partitions", GROUP, "--watch", "--json", "--store", cli.store)
    maps = Lines(watcher)
    first = json.loads(maps.next())
    assert [m["id"] for m in first["members"]] == ["alpha", "beta"]
    assert owners(first) == EXPECTED

    assert proc.stdin is not None
    proc.stdin.write("leave\n")
    proc.stdin.flush()
    second = json.loads(maps.next())
    assert (second["members"], second["items"]) != (first["members"], first["items"])
    assert said.next() == "left"
    now = second
    while [m["id"] for m in now["members"]] != ["alpha"] or owners(now) != dict.fromkeys(
        ITEMS, "alpha"
    ):
        now = json.loads(maps.next())  # the hand-over, as it happened: beta's items to alpha

    watcher.send_signal(signal.SIGINT)
    out, err = watcher.communicate(timeout=20)
    assert (watcher.returncode, err) == (130, "")  # as tenure leader --watch
    assert all(json.loads(line)["group"] == GROUP for line in out.splitlines())


def test_no_members_is_exit_1(cli: Cli) -> None:
    done = cli("partitions", GROUP, "--store", cli.store)
    assert (done.returncode, done.stdout, done.stderr) == (1, f"{GROUP}: no members\n", "")
    done = cli("partitions", GROUP, "--json", "--store", cli.store)
    assert done.returncode == 1
    assert json.loads(done.stdout) == {"group": GROUP, "members": [], "items": []}


@pytest.mark.parametrize("watch", [[], ["--watch"]], ids=["once", "watch"])
def test_bad_input_is_one_line(cli: Cli, watch: list[str]) -> None:
    for group in ("a/b", ""):
        done = cli("partitions", group, *watch, "--store", cli.store)
        assert done.returncode == 2
        assert "without '/'" in cli.one_error_line(done.stderr)
    assert not cli.db.exists(), "refused before the store was opened"
    for url, expected in [
        ("etcd://127.0.0.1:1", "127.0.0.1:1"),
        ("sqlite:////nonexistent-dir/x.db", "no such directory"),
    ]:
        done = cli("partitions", GROUP, *watch, "--store", url)
        assert done.returncode == 69
        assert expected in cli.one_error_line(done.stderr)
    done = cli("partitions", "--store", cli.store)
    assert done.returncode == 2
    assert "Missing argument 'GROUP'" in cli.one_error_line(done.stderr)


def lock(
    name: str, pid: int, label: str = "", token: int = 1, value: str | None = None
) -> LockInfo:
    return LockInfo(name, token, Holder("h", pid, label), 5.0, value=value)


def test_read_map_without_a_store() -> None:
    found = read_map(
        "g",
        [
            lock("partitions/g/item/b", 1, token=7),
            lock("partitions/g/member/m1", 1, value='{"weight": 3}'),
            lock("partitions/g/item/a", 2, "x", token=4),
            lock("partitions/g/member/m2", 2, "x", value="not json"),  # weight not proclaimed
            lock("partitions/g/member/m3", 2, "x"),  # joining: no weight said yet; same process
            lock("partitions/g/item/c", 9),  # held by a process that is no member
            lock("partitions/other/member/m9", 1),
            lock("partitions/g/bell", 1),
            lock("unrelated", 1),
        ],
    )
    assert found == {
        "group": "g",
        "members": [
            {"id": "m1", "weight": 3.0, "host": "h", "pid": 1, "label": "", "expires_in": 5.0},
            {"id": "m2", "weight": 1.0, "host": "h", "pid": 2, "label": "x", "expires_in": 5.0},
            {"id": "m3", "weight": None, "host": "h", "pid": 2, "label": "x", "expires_in": 5.0},
        ],
        "items": [
            {"item": "a", "member": ["m2", "m3"], "token": 4, "expires_in": 5.0},
            {"item": "b", "member": "m1", "token": 7, "expires_in": 5.0},
            {"item": "c", "member": None, "token": 1, "expires_in": 5.0},
        ],
    }
    assert read_map("g", []) == {"group": "g", "members": [], "items": []}
