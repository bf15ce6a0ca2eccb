"""`tenure run --read/--write NAME`: readers run together, a writer alone, and the readers who
come after a writer wait for it; `tenure ls` shows the lock; a busy one is exit 75 without
waiting; --permits with --read is one line."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import Cli

# Each command logs its start and waits for its own go-file (named by its token).
WORK = (
    'echo "start $TENURE_MODE $TENURE_LOCK $TENURE_TOKEN" >> log;'
    " while [ ! -e go-$TENURE_TOKEN ]; do sleep 0.02; done; echo end $TENURE_TOKEN >> log"
)


def test_readers_together_a_writer_alone_and_later_readers_behind_it(cli: Cli) -> None:
    def argv(mode: str) -> tuple[str, ...]:
        return ("run", "--store", cli.store, f"--{mode}", "doc", "--", "sh", "-c", WORK)

    def log() -> list[list[str]]:
        path = cli.tmp / "log"
        return [line.split() for line in path.read_text().splitlines()] if path.exists() else []

    def started() -> list[list[str]]:
        return [line[1:] for line in log() if line[0] == "start"]

    def go(token: str) -> None:
        (cli.tmp / f"go-{token}").touch()
        cli.until(lambda: ["end", token] in log(), what=f"the end of {token}")

    runs = [cli.start(*argv("read"), cwd=cli.tmp) for _ in range(2)]
    cli.until(lambda: len(started()) == 2, what="two readers running at once")
    runs.append(cli.start(*argv("write"), cwd=cli.tmp))
    cli.until(lambda: cli.held("rwlock/doc/gate"), what="the writer at the gate")
    runs.append(cli.start(*argv("read"), cwd=cli.tmp))
    cli.until(lambda: cli.held("rwlock/doc/gate", waiters=1), what="a reader behind the writer")
    listing = cli("ls", "--store", cli.store).stdout
    assert "read-write lock 'doc': 2 reader(s), gate held by" in listing, listing
    assert "1 waiting" in listing

    busy = cli("run", "--store", cli.store, "--write", "--no-wait", "doc", "--", "true")
    assert busy.returncode == 75
    assert "write lock of 'doc' not acquired (--no-wait)" in busy.stderr
    assert len(started()) == 2, "the writer or the later reader ran beside the readers"

    first, second = started()
    assert first[:2] == second[:2] == ["read", "doc"]
    go(first[2])
    assert len(started()) == 2  # one reader still holds: the writer waits
    go(second[2])
    cli.until(lambda: len(started()) == 3, what="the writer running")
    writer = started()[2]
    assert writer[0] == "write" and int(writer[2]) > max(int(first[2]), int(second[2]))
    assert len(started()) == 3  # alone: the later reader waits for it
    go(writer[2])
    cli.until(lambda: len(started()) == 4, what="the later reader running")
    reader = started()[3]
    assert reader[0] == "read" and int(reader[2]) > int(writer[2])
    go(reader[2])
    for run in runs:
        assert run.wait(timeout=20) == 0
    assert cli.locks() == []


def test_a_lock_of_two_kinds_is_one_line_and_holds_nothing(cli: Cli) -> None:
    done = cli("run", "--store", cli.store, "--permits", "2", "--read", "doc", "--", "true")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--permits and --read do not go together" in done.stderr
    assert cli.locks() == []


def test_read_and_write_together_are_refused_in_either_order(cli: Cli) -> None:
    for flags in (["--read", "--write"], ["--write", "--read"]):
        done = cli("run", "--store", cli.store, *flags, "doc", "--", "touch", "ran", cwd=cli.tmp)
        assert done.returncode == 2, flags
        assert "--read and --write do not go together" in cli.one_error_line(done.stderr)
    assert not cli.db.exists() and not (cli.tmp / "ran").exists()
