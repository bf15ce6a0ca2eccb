"""The decorators: the same code on every server, and each piece of work done by one.

``python examples/decorators.py`` runs it against the embedded store (a SQLite file in a
temporary directory here; on real servers, point $TENURE_STORE at a shared store, e.g.
``etcd://h1:2379,h2:2379``). It starts three "servers" (processes) that each call
``nightly_report()`` for the same day and ``rebuild_index()`` at the same moment: the report
is written once, and the index is rebuilt by one of them while the others skip it.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import tempfile
import time

import tenure


def launch() -> int:
    """Three servers on one store, started together."""
    with tempfile.TemporaryDirectory() as tmp:
        store = os.environ.get("TENURE_STORE", f"sqlite:///{tmp}/shared.db")
        env = {**os.environ, "TENURE_STORE": store, "START_AT": str(time.time() + 3.0)}
        servers = [
            subprocess.Popen([sys.executable, __file__], env={**env, "SERVER": f"server-{n}"})
            for n in range(3)
        ]
        return max(p.wait() for p in servers)


if __name__ == "__main__" and "SERVER" not in os.environ:
    sys.exit(launch())

# -- what each server runs -------------------------------------------------------------------

client = tenure.connect(label=os.environ.get("SERVER", ""))  # $TENURE_STORE, else embedded


@client.once("nightly-report", lambda: datetime.date.today().isoformat(), ttl=60)
def nightly_report(claim: tenure.Claim | None = None) -> str:
    """Runs once per day across every server calling it; the others get a Skipped."""
    assert claim is not None
    day = claim.record.slot if claim.record else "?"
    return f"wrote the report for {day} (token {claim.token})"


@client.lock("rebuild-index", ttl=30, wait=False)
def rebuild_index(lease: tenure.Lease | None = None) -> str:
    """Runs on one server at a time; a server that finds it running elsewhere skips it."""
    assert lease is not None
    time.sleep(1.0)  # the work; fence each write with lease.token where the resource can
    lease.check()  # still ours: LeaseLost otherwise, before the result is used
    return f"rebuilt the index (token {lease.token})"


if __name__ == "__main__":
    time.sleep(max(0.0, float(os.environ["START_AT"]) - time.time()))  # all at once
    for outcome in (nightly_report(), rebuild_index()):
        print(f"{os.environ['SERVER']}: {outcome}", flush=True)  # a Skipped says why
    client.close()
