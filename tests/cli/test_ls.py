"""`tenure ls`: the table for people, the detail of one lock, JSON for scripts."""

from __future__ import annotations

import json
import signal
from typing import TYPE_CHECKING

import tenure

if TYPE_CHECKING:
    from conftest import Cli

WAIT_FOR_GO = "while [ ! -e go ]; do sleep 0.02; done"


def test_empty(cli: Cli) -> None:
    done = cli("ls", "--store", cli.store)
    assert (done.returncode, done.stdout, done.stderr) == (0, "no locks held\n", "")
    done = cli("ls", "--store", cli.store, "--json")
    assert (done.returncode, json.loads(done.stdout)) == (0, [])


def test_table_detail_and_json(cli: Cli) -> None:
    holders = [
        cli.start(
            "run",
            "--store",
            cli.store,
            "--ttl",
            "20",
            "--label",
            label,
            name,
            "--",
            "sh",
            "-c",
            WAIT_FOR_GO,
            cwd=cli.tmp,
        )
        for name, label in (("backup-nightly", "cron"), ("db", ""))
    ]
    cli.until(lambda: len(cli.locks()) == 2, what="both locks held")
    waiter = cli.start("run", "--store", cli.store, "db", "--", "true")
    cli.until(lambda: cli.held("db", waiters=1), what="a waiter on db")

    table = cli("ls", "--store", cli.store)
    assert table.returncode == 0, table.stderr
    header, first, second = table.stdout.splitlines()
    assert header.split() == ["NAME", "TOKEN", "HOLDER", "EXPIRES", "WAITERS"]
    assert first.startswith("backup-nightly  1 ")
    assert f"pid {holders[0].pid} (cron)" in first and first.endswith("0")
    assert second.startswith("db ") and f"pid {holders[1].pid}" in second
    assert second.endswith("1")  # one waiter
    for column in ("TOKEN", "HOLDER", "EXPIRES", "WAITERS"):  # aligned columns
        at = header.index(column)
        assert first[at - 1] == second[at - 1] == " " and first[at] != " " != second[at]

    data = json.loads(cli("ls", "--store", cli.store, "--json").stdout)
    assert [entry["name"] for entry in data] == ["backup-nightly", "db"]
    cron = data[0]
    assert cron["token"] == 1 and cron["waiters"] == 0
    assert cron["holder"]["pid"] == holders[0].pid and cron["holder"]["label"] == "cron"
    assert isinstance(cron["holder"]["host"], str) and 0 < cron["expires_in"] <= 20
    assert data[1]["waiters"] == 1

    detail = cli("ls", "--store", cli.store, "backup-nightly")
    assert detail.returncode == 0
    fields = dict(line.split(":", 1) for line in detail.stdout.splitlines())
    assert fields["lock"].strip() == "backup-nightly" and fields["token"].strip() == "1"
    assert fields["pid"].strip() == str(holders[0].pid) and fields["label"].strip() == "cron"
    assert fields["expires"].strip().startswith("in ") and fields["waiters"].strip() == "0"

    (cli.tmp / "go").touch()
    for proc in (*holders, waiter):
        assert proc.wait(10) == 0
    assert cli("ls", "--store", cli.store).stdout == "no locks held\n"


def test_one_lock_not_held_exits_1(cli: Cli) -> None:
    done = cli("ls", "--store", cli.store, "nothing")
    assert (done.returncode, done.stdout) == (1, "lock 'nothing' is not held\n")
    done = cli("ls", "--store", cli.store, "--json", "nothing")
    assert (done.returncode, json.loads(done.stdout)) == (1, [])


def test_a_name_held_back_by_lock_delay(cli: Cli) -> None:
    """A holder killed without a release: once the store expires it, ls shows the name as
    held back, with the time left, and `ls NAME` exits 1 (not held)."""
    holder = cli.start(
        "run", "--store", cli.store, "--ttl", "1", "--lock-delay", "30", "job", "--",
        "sh", "-c", WAIT_FOR_GO, cwd=cli.tmp,
    )  # fmt: skip
    cli.until(lambda: cli.held("job"), what="the lock held")
    holder.kill()  # SIGKILL: no release
    cli.until(lambda: not cli.locks(), what="the store to expire the lease")
    table = cli("ls", "--store", cli.store).stdout.splitlines()
    assert table[1].split()[:6] == ["job", "1", "held", "back", "(lock-delay)", "free"]
    one = cli("ls", "--store", cli.store, "job")
    assert one.returncode == 1 and "lock-delay holds it back; free in 2" in one.stdout
    [entry] = json.loads(cli("ls", "--store", cli.store, "--json").stdout)
    assert entry["state"] == "held-back" and entry["token"] == 1
    assert 25 < entry["free_in"] <= 30
    busy = cli("run", "--store", cli.store, "--no-wait", "job", "--", "true")
    assert busy.returncode == 75


def test_a_full_semaphore_and_a_held_rwlock_by_their_names(cli: Cli) -> None:
    with tenure.connect(cli.store, label="t") as client:
        permits = [client.semaphore("pool", 2, 20).acquire() for _ in range(2)]
        writer = client.rwlock("doc", 20).write.acquire()
        pool = cli("ls", "pool", "--store", cli.store)
        doc = cli("ls", "doc", "--store", cli.store)
        as_json = json.loads(cli("ls", "pool", "--json", "--store", cli.store).stdout)
        writer.release()
        for permit in permits:
            permit.release()
    assert pool.returncode == 0, pool.stderr
    lines = pool.stdout.splitlines()
    assert [line.split()[0] for line in lines[1:3]] == ["semaphore/pool/0", "semaphore/pool/1"]
    assert lines[-1] == "semaphore 'pool': 2 of 2 permits held (slots 0, 1), 0 free, 0 waiting"
    assert doc.returncode == 0, doc.stderr
    assert doc.stdout.splitlines()[-1].startswith("read-write lock 'doc': 0 reader(s), gate held")
    assert sorted(info["name"] for info in as_json) == ["semaphore/pool/0", "semaphore/pool/1"]
    assert cli("ls", "pool", "--store", cli.store).returncode == 1  # released: nothing held


def test_watch_redraws_on_changes_and_ends_on_ctrl_c(cli: Cli) -> None:
    """A real `tenure ls --watch` on a pipe: a frame per change, each ended by a blank line."""
    watcher = cli.start("ls", "--watch", "--store", cli.store)
    assert watcher.stdout is not None

    def frame() -> list[str]:  # the next frame: the lines up to a blank one
        lines = []
        while (line := watcher.stdout.readline()) != "\n":
            assert line, "tenure ls --watch ended"
            lines.append(line.rstrip("\n"))
        return lines

    assert frame() == ["no locks held"]  # the first frame: it is up (no clock before this)
    with tenure.connect(cli.store, label="t") as client:
        lease = client.lock("deploy", 20).acquire()
        held = frame()
        lease.release()
        freed = frame()
    assert held[0].split() == ["NAME", "TOKEN", "HOLDER", "EXPIRES", "WAITERS"]
    assert held[1].split()[:2] == ["deploy", str(lease.token)] and "(t)" in held[1]
    assert freed == ["no locks held"]
    watcher.send_signal(signal.SIGINT)
    _, err = watcher.communicate(timeout=20)
    assert (watcher.returncode, err) == (0, "")
