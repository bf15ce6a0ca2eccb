"""`tenure run --permits N`: at most N commands at once, in arrival order; `tenure ls` shows
the semaphore; a full one is exit 75 without waiting; a bad count is one line."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import Cli

WAIT_FOR_GO = "while [ ! -e go-$TENURE_PERMIT ]; do sleep 0.02; done"


def test_at_most_n_commands_at_once_and_the_rest_in_line(cli: Cli) -> None:
    work = (
        'echo "start $TENURE_SEMAPHORE $TENURE_PERMIT $TENURE_LOCK $TENURE_TOKEN" >> log;'
        f" {WAIT_FOR_GO}; rm go-$TENURE_PERMIT; echo end >> log"
    )
    argv = ("run", "--store", cli.store, "--permits", "2", "gpu", "--", "sh", "-c", work)
    runs = [cli.start(*argv, cwd=cli.tmp) for _ in range(2)]

    def starts() -> list[list[str]]:
        log = cli.tmp / "log"
        lines = log.read_text().splitlines() if log.exists() else []
        return [line.split()[1:] for line in lines if line.startswith("start")]

    cli.until(lambda: len(starts()) == 2, what="two commands running")
    runs.append(cli.start(*argv, cwd=cli.tmp))
    cli.until(lambda: cli.held("semaphore/gpu/queue"), what="the third in line")
    listing = cli("ls", "--store", cli.store)
    assert "semaphore 'gpu': 2 of 2 permits held (slots 0, 1), 0 free, 1 waiting" in listing.stdout

    busy = cli("run", "--store", cli.store, "--permits", "2", "--no-wait", "gpu", "--", "true")
    assert busy.returncode == 75
    assert "no permit of 'gpu' acquired (--no-wait): all 2 are held" in busy.stderr
    assert len(starts()) == 2, "the third ran beside two others"

    (cli.tmp / "go-1").touch()  # slot 1's command ends; the third takes slot 1
    cli.until(lambda: len(starts()) == 3, what="the third running")
    first, second, third = starts()
    assert {first[1], second[1]} == {"0", "1"} and third[1] == "1"
    assert all(s[0] == "gpu" and s[2] == f"semaphore/gpu/{s[1]}" for s in (first, second, third))
    by_slot = {s[1]: int(s[3]) for s in (first, second)}
    assert int(third[3]) > by_slot["1"]  # the slot's token grew
    for slot in ("0", "1"):
        (cli.tmp / f"go-{slot}").touch()
        cli.until(lambda slot=slot: not (cli.tmp / f"go-{slot}").exists(), what="its end")
    for run in runs:
        assert run.wait(timeout=20) == 0
    assert cli.locks() == []


def test_a_bad_count_is_one_line_and_holds_nothing(cli: Cli) -> None:
    for permits in ("0", "300", "x"):
        done = cli("run", "--store", cli.store, "--permits", permits, "gpu", "--", "true")
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        assert "permits" in done.stderr.lower() or "'x'" in done.stderr
    assert cli.locks() == []


def test_ls_says_how_many_permits_are_free(cli: Cli) -> None:
    import tenure

    with tenure.connect(cli.store) as client:
        client.semaphore("api", 3, ttl=10).acquire()
        listing = cli("ls", "--store", cli.store).stdout
    assert "semaphore 'api': 1 of 3 permits held (slots 0), 2 free, 0 waiting" in listing, listing
