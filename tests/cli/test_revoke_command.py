"""``tenure revoke NAME``: a stuck ``tenure run`` is killed (exit 78) at its next renewal, the
name is held back and shown as revoked until the old lease could no longer act; ``--now``
frees it at once and says the risk; a free name exits 1, a store that cannot revoke exits 2."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import Cli

TTL = "1.5"


def _start_holder(cli: Cli, name: str, *extra: str) -> None:
    """A ``tenure run`` whose command would work for a minute, once it holds ``name``."""
    cli.start(
        "run", name, "--ttl", TTL, *extra, "--store", cli.store, "--", "sh", "-c",
        f"echo $$ > {cli.tmp / 'pid'}; exec sleep 60",
    )  # fmt: skip
    cli.pid_in("pid")
    assert cli.held(name)


def test_a_revoked_command_is_killed_and_the_name_held_back(cli: Cli) -> None:
    _start_holder(cli, "job", "--lock-delay", "30")
    holder = cli.started[0]
    done = cli("revoke", "job", "--reason", "stuck on NFS", "--store", cli.store)
    assert done.returncode == 0, done.stderr
    assert "revoked lock 'job' (token 1)" in done.stdout and done.stderr == ""
    _, err = holder.communicate(timeout=20)  # told at its next renewal, ttl/3 away
    assert holder.returncode == 78, err
    assert "revoked by" in err and "stuck on NFS" in err
    shown = cli("ls", "job", "--store", cli.store)
    assert shown.returncode == 1
    assert "held back: revoked by" in shown.stdout and "stuck on NFS" in shown.stdout
    [held] = json.loads(cli("ls", "--json", "--store", cli.store).stdout)
    assert held["state"] == "held-back" and held["revoked"]["reason"] == "stuck on NFS"
    assert held["free_in"] > 20  # its 30 s lock-delay still holds it: nobody was granted it
    busy = cli("run", "job", "--no-wait", "--store", cli.store, "--", "true")
    assert busy.returncode == 75, busy.stderr


def test_now_frees_at_once_and_says_the_risk(cli: Cli) -> None:
    _start_holder(cli, "dead", "--lock-delay", "60")
    started = time.monotonic()
    done = cli("revoke", "dead", "--now", "--store", cli.store)
    assert done.returncode == 0, done.stderr
    assert "--now freed 'dead' at once" in cli.one_error_line(done.stderr)
    taken = cli(
        "run", "dead", "--no-wait", "--store", cli.store, "--", "sh", "-c", "echo $TENURE_TOKEN"
    )
    assert taken.returncode == 0, taken.stderr
    assert taken.stdout.strip() == "2"  # a higher token, well before any TTL or delay passed
    assert time.monotonic() - started < 60
    cli.started[0].communicate(timeout=20)
    assert cli.started[0].returncode == 78


def test_a_name_not_held_exits_1(cli: Cli) -> None:
    done = cli("revoke", "nobody", "--store", cli.store)
    assert done.returncode == 1
    assert cli.one_error_line(done.stderr) == "tenure: lock 'nobody' is not held: nothing to revoke"
    assert done.stdout == ""


def test_a_store_that_cannot_revoke_exits_2(cli: Cli) -> None:
    done = cli("revoke", "x", "-q", "--store", "redlock://127.0.0.1:1,127.0.0.1:2")
    assert done.returncode == 2, done.stderr
    assert "cannot revoke a grant safely" in cli.one_error_line(done.stderr)
