"""tenure.fence.FileFence on real files in tmp_path, with real processes racing and crashing."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from multiprocessing.synchronize import Barrier, Event
from pathlib import Path
from typing import Any

import pytest

from tenure._errors import InvalidArgument, StaleToken, TenureError
from tenure.fence import FileFence

NAME = "report.csv"


@pytest.fixture
def fence(tmp_path: Path) -> FileFence:
    return FileFence(tmp_path)


def snapshot(path: Path) -> tuple[bytes, int, int]:
    """The file's bytes, inode and modification time: equal snapshots mean it was not touched."""
    stat = path.stat()
    return path.read_bytes(), stat.st_ino, stat.st_mtime_ns


def temporaries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tenure-tmp"))


# -- the rules -------------------------------------------------------------------------------


def test_first_write_is_admitted_kept_and_written(fence: FileFence, tmp_path: Path) -> None:
    assert fence.highest(NAME) is None
    fence.write(NAME, 7, b"a,b\n")
    assert (tmp_path / NAME).read_bytes() == b"a,b\n"
    assert fence.highest(NAME) == 7
    assert (tmp_path / f".{NAME}.tenure-token").read_text() == "7\n"
    assert temporaries(tmp_path) == []


def test_equal_token_is_admitted(fence: FileFence, tmp_path: Path) -> None:
    fence.write(NAME, 7, "one")
    fence.write(NAME, 7, "two")
    assert (tmp_path / NAME).read_text() == "two"
    assert fence.highest(NAME) == 7


def test_higher_token_is_admitted_and_kept(fence: FileFence, tmp_path: Path) -> None:
    fence.write(NAME, 7, "one")
    fence.write(NAME, 12, "two")
    assert (tmp_path / NAME).read_text() == "two"
    assert fence.highest(NAME) == 12


def test_lower_token_is_refused_and_the_file_is_left_as_it_was(
    fence: FileFence, tmp_path: Path
) -> None:
    fence.write(NAME, 12, "kept")
    before = snapshot(tmp_path / NAME)
    with pytest.raises(StaleToken) as refused:
        fence.write(NAME, 7, "stale")
    assert (refused.value.resource, refused.value.token, refused.value.highest) == (NAME, 7, 12)
    assert snapshot(tmp_path / NAME) == before  # same bytes, same inode: not replaced
    assert fence.highest(NAME) == 12
    assert temporaries(tmp_path) == []


def test_a_read_admits_its_token_and_shuts_out_older_writes(
    fence: FileFence, tmp_path: Path
) -> None:
    fence.write(NAME, 3, "from 3")
    assert fence.read(NAME, 4) == b"from 3"  # a newer holder reads
    with pytest.raises(StaleToken):
        fence.write(NAME, 3, "late, from 3")
    with pytest.raises(StaleToken):
        fence.read(NAME, 3)
    fence.admit(NAME, 5)
    with pytest.raises(StaleToken):
        fence.admit(NAME, 4)
    assert (tmp_path / NAME).read_text() == "from 3"
    assert fence.highest(NAME) == 5


def test_files_are_independent(fence: FileFence, tmp_path: Path) -> None:
    fence.write("a", 9, "a")
    fence.write("b", 2, "b")
    assert (fence.highest("a"), fence.highest("b")) == (9, 2)


def test_largest_token_and_text_as_utf8(fence: FileFence, tmp_path: Path) -> None:
    fence.write(NAME, 2**63 - 1, "café")
    assert (tmp_path / NAME).read_bytes() == "café".encode()
    with pytest.raises(StaleToken):
        fence.write(NAME, 2**63 - 2, "x")


def test_a_replaced_file_keeps_its_permissions(fence: FileFence, tmp_path: Path) -> None:
    fence.write(NAME, 1, "one")
    (tmp_path / NAME).chmod(0o640)
    fence.write(NAME, 2, "two")
    assert (tmp_path / NAME).stat().st_mode & 0o777 == 0o640


def test_a_spoiled_token_record_refuses_every_write(fence: FileFence, tmp_path: Path) -> None:
    fence.write(NAME, 3, "kept")
    (tmp_path / f".{NAME}.tenure-token").write_text("garbage\n")
    with pytest.raises(TenureError, match="does not hold a fencing token"):
        fence.write(NAME, 4, "new")
    assert (tmp_path / NAME).read_text() == "kept"


# -- bad input: one line, nothing written ----------------------------------------------------


@pytest.mark.parametrize("token", [-1, 2**63, "5", 1.0, True, None])
def test_bad_token_is_invalid_argument(fence: FileFence, tmp_path: Path, token: Any) -> None:
    with pytest.raises(InvalidArgument, match="fencing token must be an integer") as bad:
        fence.write(NAME, token, "x")
    assert "\n" not in str(bad.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["", ".hidden", "a/b", "../up", "a\x00b", "x" * 227, 3, None])
def test_bad_name_is_invalid_argument(fence: FileFence, tmp_path: Path, name: Any) -> None:
    with pytest.raises(InvalidArgument) as bad:
        fence.write(name, 1, "x")
    assert "\n" not in str(bad.value)
    assert list(tmp_path.iterdir()) == []


def test_the_longest_name_fits(fence: FileFence, tmp_path: Path) -> None:
    fence.write("x" * 226, 1, "x")
    assert (tmp_path / ("x" * 226)).read_text() == "x"


@pytest.mark.parametrize("data", [5, None, bytearray(b"x"), ["x"]])
def test_bad_data_is_invalid_argument(fence: FileFence, tmp_path: Path, data: Any) -> None:
    with pytest.raises(InvalidArgument, match="bytes or str"):
        fence.write(NAME, 1, data)
    assert list(tmp_path.iterdir()) == []


def test_a_directory_that_is_not_one_is_invalid_argument(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    for where in (tmp_path / "missing", tmp_path / "file"):
        with pytest.raises(InvalidArgument, match="is not a directory"):
            FileFence(where)


# -- a crashed writer's temporary file -------------------------------------------------------


def test_a_stray_temporary_is_ignored_then_removed_by_the_next_write(
    fence: FileFence, tmp_path: Path
) -> None:
    fence.write(NAME, 1, "old")
    stray = tmp_path / f".{NAME}.0123456789abcdef.tenure-tmp"
    stray.write_text("half of a new")
    other = tmp_path / f".{NAME}.x.0123456789abcdef.tenure-tmp"  # the file "report.csv.x"'s
    other.write_text("another file's")
    assert fence.read(NAME, 1) == b"old"
    fence.write(NAME, 2, "new")
    assert not stray.exists()
    assert other.exists()
    assert (tmp_path / NAME).read_text() == "new"


# -- real processes --------------------------------------------------------------------------


def _writer(
    directory: str,
    token: int,
    data: str,
    reached: Event | None,
    go: Event | None,
    results: Any,
) -> None:
    """Write ``data`` with ``token``; with events, stop just before the file's rename (after the
    token check and the temporary file) until ``go`` is set, or for ever (to be killed)."""
    if reached is not None and go is not None:
        rename = os.replace

        def held(src: Any, dst: Any) -> None:
            if Path(dst).name == NAME:
                reached.set()
                go.wait()
            rename(src, dst)

        os.replace = held  # this child process only
    try:
        FileFence(directory).write(NAME, token, data)
        results.put((token, "written"))
    except StaleToken as exc:
        results.put((token, f"refused below {exc.highest}"))


def _waiting_for_flock(pid: int) -> bool:
    """Linux's /proc/locks shows a process blocked on a lock as a `->` line with its pid."""
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" in fields and "FLOCK" in fields and str(pid) in fields:
            return True
    return False


def _wait_until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 60  # readiness only: nothing asserted about how long
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting until {what}")
        time.sleep(0.01)


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux's /proc/locks")
def test_a_newer_writer_waits_for_the_older_ones_check_and_replace(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    reached, go = ctx.Event(), ctx.Event()
    older = ctx.Process(target=_writer, args=(str(tmp_path), 5, "from 5", reached, go, results))
    older.start()
    assert reached.wait(60)  # 5 was admitted; its file is written but not yet renamed
    newer = ctx.Process(target=_writer, args=(str(tmp_path), 6, "from 6", None, None, results))
    newer.start()
    assert newer.pid is not None
    # Without the lock, 6 would be written now and 5's rename would then overwrite it.
    _wait_until(lambda: _waiting_for_flock(newer.pid), "the newer writer waits for the lock")
    go.set()
    older.join(60)
    newer.join(60)
    assert (older.exitcode, newer.exitcode) == (0, 0)
    assert sorted([results.get(timeout=10), results.get(timeout=10)]) == [
        (5, "written"),
        (6, "written"),
    ]
    assert (tmp_path / NAME).read_text() == "from 6"
    before = snapshot(tmp_path / NAME)
    late = ctx.Process(target=_writer, args=(str(tmp_path), 5, "late", None, None, results))
    late.start()
    late.join(60)
    assert results.get(timeout=10) == (5, "refused below 6")
    assert snapshot(tmp_path / NAME) == before


def test_processes_racing_with_different_tokens_leave_the_highest_ones_file(
    tmp_path: Path,
) -> None:
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    tokens = [3, 9, 4, 8, 1, 7]
    start: Barrier = ctx.Barrier(len(tokens))
    procs = [
        ctx.Process(target=_racer, args=(str(tmp_path), token, start, results)) for token in tokens
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    assert [proc.exitcode for proc in procs] == [0] * len(tokens)
    outcomes = dict(results.get(timeout=10) for _ in tokens)
    assert outcomes[9] == "written"  # the highest is never refused
    for token, outcome in outcomes.items():
        # whatever the order: a refusal names a higher token that was admitted before
        assert outcome == "written" or int(outcome.split()[-1]) > token
    assert (tmp_path / NAME).read_text() == "from 9"
    assert FileFence(tmp_path).highest(NAME) == 9
    assert temporaries(tmp_path) == []


def _racer(directory: str, token: int, start: Barrier, results: Any) -> None:
    start.wait()
    _writer(directory, token, f"from {token}", None, None, results)


def test_a_writer_killed_before_its_rename_leaves_the_old_file(tmp_path: Path) -> None:
    FileFence(tmp_path).write(NAME, 1, "old")
    before = snapshot(tmp_path / NAME)
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    reached, never = ctx.Event(), ctx.Event()
    doomed = ctx.Process(target=_writer, args=(str(tmp_path), 2, "new", reached, never, results))
    doomed.start()
    assert reached.wait(60)  # its temporary file is written and flushed; the rename is next
    doomed.kill()
    doomed.join(60)
    assert snapshot(tmp_path / NAME) == before
    [stray] = temporaries(tmp_path)
    assert (tmp_path / stray).read_text() == "new"
    assert FileFence(tmp_path).highest(NAME) == 2  # kept before the rename: 1 stays shut out
    with pytest.raises(StaleToken):
        FileFence(tmp_path).write(NAME, 1, "stale")
    FileFence(tmp_path).write(NAME, 2, "again")  # the dead writer's lock went with it
    assert (tmp_path / NAME).read_text() == "again"
    assert temporaries(tmp_path) == []


def test_the_example_refuses_the_late_write() -> None:
    example = Path(__file__).parents[1] / "examples" / "fence_files.py"
    done = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "holder 1 (token 1) wrote report.csv",
        "holder 2 (token 2) added a row to report.csv",
        "holder 1's late write refused: stale fencing token 1 for 'report.csv': "
        "2 was already accepted",
        "region,total",
        "north,10",
        "south,7",
    ]


def test_the_docs_page_shows_the_example_as_it_is() -> None:
    root = Path(__file__).parents[1]
    page = (root / "docs" / "fencing-files.md").read_text()
    code = page.split("```python\n", 1)[1].split("```", 1)[0]
    assert code in (root / "examples" / "fence_files.py").read_text()
