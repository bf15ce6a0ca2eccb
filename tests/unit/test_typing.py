"""The sync API is derived from the async one (``tenure._modes``), and a type checker sees the
result: blocking signatures on the sync kind, coroutines on the async kind, the same parameters.
mypy is run on code that uses both; a misuse of either must fail type-checking."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")
SRC = Path(__file__).resolve().parents[2] / "src"

USES = """
import tenure

def sync(client: tenure.Client) -> None:
    lock = client.lock("job", ttl=10)
    reveal_type(lock)
    lease = lock.acquire(wait=False, timeout=1.0)
    reveal_type(lease)
    reveal_type(lease.release())
    reveal_type(client.semaphore("gpu", 3).acquire())
    reveal_type(client.rwlock("doc").read.acquire())
    reveal_type(client.election("primary", value="me").acquire().proclaim("you"))
    reveal_type(client.once("report", "2026-12-03").acquire())
    reveal_type(client.locks())
    for leader in client.election("primary").observe():
        reveal_type(leader)

async def asynchronous(client: tenure.AsyncClient) -> None:
    lease = await client.lock("job").acquire()
    reveal_type(lease)
    pending = client.lock("job").acquire()
    _ = reveal_type(pending)
    await pending
    async for leader in client.election("primary").observe():
        reveal_type(leader)
"""

MISUSES = {
    "an unknown keyword": 'client.lock("job").acquire(wiat=False)',
    "a wrong type": 'client.lock("job").acquire(timeout="soon")',
    "a sync result awaited": "await client.lock('job').acquire()",
    "an async result used as a lease": 'async_client.lock("job").acquire().token',
}


def _mypy(tmp_path: Path, code: str) -> tuple[str, int]:
    path = tmp_path / "uses.py"
    path.write_text(textwrap.dedent(code))
    os.environ["MYPYPATH"] = str(SRC)
    try:
        out, err, status = mypy_api.run(
            ["--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"), str(path)]
        )
    finally:
        del os.environ["MYPYPATH"]
    return out + err, status


def test_mypy_sees_blocking_and_async_signatures(tmp_path: Path) -> None:
    out, status = _mypy(tmp_path, USES)
    lines = out.splitlines()
    revealed = [line.split("Revealed type is ", 1)[1] for line in lines if "Revealed" in line]
    assert revealed == [
        '"tenure._lock.Lock"',
        '"tenure._lease.Lease"',
        '"None"',
        '"tenure._semaphore.Permit"',
        '"tenure._rwlock.RWLease"',
        '"None"',
        '"tenure._once.Claim"',
        '"list[tenure._values.LockInfo]"',
        '"tenure._election.Leader | None"',
        '"tenure._lease.AsyncLease"',
        '"typing.Coroutine[Any, Any, tenure._lease.AsyncLease]"',
        '"tenure._election.Leader | None"',
    ], out
    assert status == 0, out


@pytest.mark.parametrize("misuse", sorted(MISUSES))
def test_a_misuse_fails_type_checking(tmp_path: Path, misuse: str) -> None:
    code = f"""
    import tenure

    async def use(client: tenure.Client, async_client: tenure.AsyncClient) -> object:
        return {MISUSES[misuse]}
    """
    out, status = _mypy(tmp_path, code)
    assert status == 1 and "error:" in out, out
