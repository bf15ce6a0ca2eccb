"""A cursor that travels with the lock: each holder resumes where the last one stopped.

Three workers take turns at one lock and advance a cursor kept in ``lease.state`` — no second
database, no fence of its own: the store writes it only while the writer's grant is current.
Then a holder that was paused while the lock moved on (its clock stood still and its renewals
hung, so it still believes it holds the lock) tries to write its old cursor: the store refuses,
the lease is lost, and the cursor does not go back. Run it: ``python examples/lock_state.py``
(the embedded store, in a temp dir).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import tenure
from tenure.testing import FaultyStore, ManualClock


def advance(client: tenure.Client, worker: str, count: int) -> None:
    with client.lock("ingest", ttl=5) as lease:
        cursor = int(lease.state.get("cursor") or 0)  # where the last holder stopped
        for _ in range(count):
            cursor += 1  # ... process item number `cursor` ...
            lease.state.put("cursor", str(cursor))  # committed only while this grant is current
        print(f"{worker} (token {lease.token}) advanced the cursor to {cursor}")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'locks.db'}"
        with tenure.connect(url) as client:
            for worker, count in (("w1", 3), ("w2", 2), ("w3", 4)):
                advance(client, worker, count)

        paused = FaultyStore.from_url(url)
        with (
            tenure.Client(paused, clock=ManualClock(), lock_delay=0) as old_client,
            tenure.connect(url) as new_client,
        ):
            old = old_client.lock("ingest", ttl=1, lock_delay=0).acquire()
            seen = old.state.get("cursor")
            paused.hang_keep_alive = True  # paused: no renewals, its own clock stands still
            new = new_client.lock("ingest", ttl=5).acquire(timeout=15)  # after its expiry
            new.state.put("cursor", str(int(new.state.get("cursor") or 0) + 1))
            try:
                old.state.put("cursor", str(int(seen or 0) + 1))  # the paused one wakes up
            except tenure.LeaseLost:
                print(f"the paused holder's write was refused (token {old.token} < {new.token})")
            print(f"cursor now {new.state.get('cursor')}")
            new.release()


if __name__ == "__main__":
    main()
