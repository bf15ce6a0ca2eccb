"""The embedded store's file: made owner-only, and refused when other users could write it
(whoever can write the file or its directory can forge a lock or a token)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

import tenure
from secrecy import one_error_line, run_cli
from tenure import InvalidArgument

NOBODY = 65534


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_default_store_is_owner_only(tmp_path: Path) -> None:
    done = run_cli("run", "nightly", "--", "true", env={"XDG_STATE_HOME": str(tmp_path / "state")})
    assert done.returncode == 0, done.stderr
    [db] = (tmp_path / "state").rglob("locks.db")
    assert mode(db.parent) == 0o700
    assert mode(db) == 0o600
    for side in db.parent.iterdir():  # -wal, -shm, -wake: none writable by others
        assert not mode(side) & 0o022, side


def test_a_new_store_file_is_owner_only(tmp_path: Path) -> None:
    old = os.umask(0)  # even with a permissive umask
    try:
        with tenure.connect(f"sqlite:///{tmp_path}/s.db") as client, client.lock("x", ttl=5):
            pass
    finally:
        os.umask(old)
    assert mode(tmp_path / "s.db") == 0o600


@pytest.mark.parametrize("bits", [0o770, 0o707, 0o1777])
def test_a_directory_others_can_write_is_refused(tmp_path: Path, bits: int) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(bits)
    with pytest.raises(InvalidArgument, match=r"chmod go-w .*shared"):
        tenure.connect(f"sqlite:///{shared}/s.db")
    assert list(shared.iterdir()) == []  # nothing created
    done = run_cli("run", "--store", f"sqlite:///{shared}/s.db", "job", "--", "true")
    assert done.returncode == 2
    assert "forge a lock" in one_error_line(done)
    assert list(shared.iterdir()) == []


def test_a_store_file_others_can_write_is_refused_and_left_alone(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    with tenure.connect(url) as client, client.lock("x", ttl=5) as lease:
        token = lease.token
    db = tmp_path / "s.db"
    db.chmod(0o666)
    before = db.read_bytes()
    with pytest.raises(InvalidArgument, match=r"every user can write it.*chmod go-w"):
        tenure.connect(url)
    assert db.read_bytes() == before
    db.chmod(0o600)  # the fix the message gives
    with tenure.connect(url) as client, client.lock("x", ttl=5) as lease:
        assert lease.token > token


def test_a_planted_side_file_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    planted = tmp_path / "s.db-wal"
    planted.write_bytes(b"")
    planted.chmod(0o622)
    with pytest.raises(InvalidArgument, match=r"s\.db-wal is not yours alone"):
        tenure.connect(url)
    assert not (tmp_path / "s.db").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_files_owned_by_another_user_are_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    with tenure.connect(url) as client, client.lock("x", ttl=5):
        pass
    os.chown(tmp_path / "s.db", NOBODY, NOBODY)
    with pytest.raises(InvalidArgument, match="owned by another user"):
        tenure.connect(url)
    os.chown(tmp_path / "s.db", 0, 0)
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(InvalidArgument, match="owned by another user"):
        tenure.connect(f"sqlite:///{theirs}/s.db")
