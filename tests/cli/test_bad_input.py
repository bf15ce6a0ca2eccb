"""Bad input: one line on stderr, a documented exit code, no traceback, nothing held or made."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import Cli

USAGE = [
    (["--ttl", "0"], "ttl must be in"),
    (["--ttl", "-3"], "ttl must be in"),
    (["--ttl", "nan"], "ttl must be finite"),
    (["--ttl", "inf"], "ttl must be finite"),
    (["--ttl", "1e12"], "ttl must be in"),
    (["--ttl", "0.1"], "too short"),
    (["--ttl", "soon"], "'soon' is not a valid float"),
    (["--timeout", "-1"], "timeout must be >= 0"),
    (["--timeout", "nan"], "timeout must be >= 0"),
    (["--grace", "nan"], "grace must be"),
    (["--grace", "-1"], "grace must be"),
    (["--ttl", "3", "--grace", "8"], "the largest grace is 0.87s"),
    (["--lock-delay", "-1"], "lock_delay must be"),
    (["--lock-delay", "nan"], "lock_delay must be"),
    (["--label", "a\nb"], "label must be printable"),
    (["--bogus"], "No such option '--bogus'"),
]


@pytest.mark.parametrize(("options", "expected"), USAGE, ids=lambda v: repr(v))
def test_bad_options(cli: Cli, options: list[str], expected: str) -> None:
    done = cli("run", "--store", cli.store, *options, "job", "--", "touch", "ran", cwd=cli.tmp)
    assert done.returncode == 2
    line = cli.one_error_line(done.stderr)
    assert line.startswith("tenure: error: ") and expected in line
    assert not cli.db.exists() and not (cli.tmp / "ran").exists()  # nothing made, nothing run


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("", "must not be empty"),
        ("x" * 256, "longer than 255 bytes"),
        ("é" * 128, "longer than 255 bytes"),
        ("tab\there", "control character"),
        ("nul\x01", "control character"),
        (" padded", "whitespace"),
    ],
    ids=["empty", "256-bytes", "256-utf8-bytes", "tab", "control", "padded"],
)
def test_bad_lock_names(cli: Cli, name: str, expected: str) -> None:
    for args in (["run", name, "--", "true"], ["ls", name]):
        done = cli(*args, "--store", cli.store)
        assert done.returncode == 2
        assert expected in cli.one_error_line(done.stderr)
    assert not cli.db.exists()


@pytest.mark.parametrize(
    ("name", "kept_by"),
    [
        ("semaphore/X/0", "semaphores"),
        ("rwlock/x", "read-write locks"),
        ("partitions/g/a", "partition groups"),
        ("once:job", "once-per-slot jobs"),
    ],
)
@pytest.mark.parametrize("command", ["run", "elect"])
def test_reserved_lock_names_are_refused(cli: Cli, command: str, name: str, kept_by: str) -> None:
    """A name a recipe keeps for its own locks (a semaphore's permit, say) is refused in one
    line, exit 2: the command does not run and nothing is held."""
    done = cli(command, "--store", cli.store, name, "--", "touch", "ran", cwd=cli.tmp)
    assert done.returncode == 2
    line = cli.one_error_line(done.stderr)
    assert f"lock name {name!r} is under" in line and kept_by in line
    assert not (cli.tmp / "ran").exists()
    assert not cli.db.exists()  # refused before the store is opened: nothing made


def test_usage_errors_are_one_line(cli: Cli) -> None:
    for args, expected in [
        (["run", "job"], "Missing argument 'COMMAND...'"),
        (["run"], "Missing argument 'NAME'"),
        (["frobnicate"], "No such command 'frobnicate'"),
        (["ls", "a", "b"], "unexpected extra argument"),
    ]:
        done = cli(*args, "--store", cli.store)
        assert done.returncode == 2, args
        assert expected in cli.one_error_line(done.stderr)


@pytest.mark.parametrize(
    ("url", "code", "expected"),
    [
        ("foo://bar", 2, "unknown store URL scheme 'foo'"),
        ("consul://localhost:8500", 2, "unknown store URL scheme 'consul'"),
        ("etcd://127.0.0.1:1", 69, "127.0.0.1:1"),
        ("sqlite://host/x.db", 2, "bad SQLite store URL"),
        ("sqlite:////nonexistent-dir/x.db", 69, "no such directory"),
        ("sqlite:////", 2, "the path '/' names a directory, not a file"),
        ("sqlite:///dir/", 2, "the path 'dir/' names a directory, not a file"),
        ("sqlite:///..", 2, "the path '..' names a directory, not a file"),
        ("sqlite:///a%00b", 2, "the path holds a NUL byte"),
    ],
)
def test_bad_store_urls(cli: Cli, url: str, code: int, expected: str) -> None:
    for args in (
        ["run", "--store", url, "job", "--", "true"],
        ["ls", "--store", url],
        ["history", "--store", url, "job"],
    ):
        done = cli(*args, cwd=cli.tmp)
        assert done.returncode == code
        assert expected in cli.one_error_line(done.stderr)


def test_store_is_a_directory(cli: Cli) -> None:
    done = cli("run", "--store", f"sqlite:///{cli.tmp}", "job", "--", "touch", "ran", cwd=cli.tmp)
    assert done.returncode == 69
    assert "is a directory" in cli.one_error_line(done.stderr)
    assert not (cli.tmp / "ran").exists()


def test_corrupt_store_file_is_left_alone(cli: Cli) -> None:
    garbage = b"this is not an SQLite database at all, just garbage " * 100
    cli.db.write_bytes(garbage)
    for args in (["run", "--store", cli.store, "job", "--", "true"], ["ls", "--store", cli.store]):
        done = cli(*args)
        assert done.returncode == 69
        assert "corrupt" in cli.one_error_line(done.stderr)
    assert cli.db.read_bytes() == garbage
    assert sorted(p.name for p in cli.tmp.iterdir()) == ["s.db"]


def test_missing_and_unexecutable_commands(cli: Cli) -> None:
    script = cli.tmp / "script.sh"
    script.write_text("#!/bin/sh\ntrue\n")
    script.chmod(0o644)
    for command, code, expected in [
        ("no-such-command-xyz", 127, "command not found"),
        (str(cli.tmp / "missing"), 127, "no such file"),
        (str(script), 126, "permission denied"),
        (str(cli.tmp), 126, "is a directory"),
    ]:
        done = cli("run", "--store", cli.store, "job", "--", command)
        assert done.returncode == code, command
        assert expected in cli.one_error_line(done.stderr)
    assert not cli.db.exists()  # checked before the store was even opened


def _as_nobody() -> list[str] | None:
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    return [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def test_unreadable_and_read_only_stores(cli: Cli) -> None:
    prefix = _as_nobody()
    if prefix is None:
        pytest.skip("running as root without setpriv: cannot drop privileges to test this")
    tool = str(cli("--version").args[0])
    if prefix and subprocess.run([*prefix, tool, "--version"], capture_output=True).returncode:
        pytest.skip("user nobody cannot run this virtualenv's tenure")
    # Not under tmp_path: its parents are private to root, so nobody could not even look.
    base = Path(tempfile.mkdtemp(prefix="tenure-cli-"))
    try:
        base.chmod(0o755)
        store = base / "ro.db"
        assert cli("ls", "--store", f"sqlite:///{store}").returncode == 0  # a real store
        store.chmod(0o644)  # readable by others, writable by its owner only
        private = base / "private"
        private.mkdir(mode=0o700)
        shutil.copy(store, private / "p.db")
        before = store.read_bytes()
        for url, expected in [
            (f"sqlite:///{store}", "read-only"),
            (f"sqlite:///{private / 'p.db'}", "Permission denied"),
        ]:
            done = subprocess.run(
                [*prefix, tool, "run", "--store", url, "job", "--", "true"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            assert done.returncode == 69, done.stderr
            assert expected in cli.one_error_line(done.stderr)
        assert store.read_bytes() == before
    finally:
        shutil.rmtree(base)


def test_help_documents_exit_codes_and_bare_tenure_is_usage(cli: Cli) -> None:
    for args in (["--help"], ["run", "--help"]):
        done = cli(*args)
        assert done.returncode == 0
        for code in ("69 ", "75 ", "76 ", "126/127", "128+N", "129/130/143"):
            assert code in done.stdout, (args, code)
    bare = cli()
    assert bare.returncode == 2 and bare.stdout == ""
    assert bare.stderr.startswith("Usage: tenure") and "Traceback" not in bare.stderr


@pytest.mark.parametrize("url", ["redis://127.0.0.1:1/0", "redlock://127.0.0.1:1,127.0.0.1:2"])
@pytest.mark.parametrize("command", [["run", "job"], ["elect", "job"]])
def test_require_correctness_refuses_an_efficiency_grade_store(
    cli: Cli, url: str, command: list[str]
) -> None:
    """Refused before anything is opened: nothing listens on these ports."""
    done = cli(*command, "--require", "correctness", "--store", url, "--", "true")
    assert done.returncode == 2
    assert "efficiency-grade" in cli.one_error_line(done.stderr)
