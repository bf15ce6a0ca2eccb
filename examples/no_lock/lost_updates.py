"""Avoiding lost updates: optimistic concurrency with a version number, no lock.

Two clerks add to the same account at the same moment: both read balance 100 at version 1
before either writes. Each write is ``UPDATE … SET balance = ?, version = version + 1 WHERE id
= ? AND version = ?``: the first lands, the second changes no row, reads again (balance 110 or
120, version 2) and writes from there. Both additions survive. The same over tenure's store:
``client.versioned(key).update(change)``.

    python examples/no_lock/lost_updates.py
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
import threading
from pathlib import Path
from typing import Any

import tenure
from tenure.optimistic import update_row


def clerk(db: Path, amount: int, both_read: threading.Barrier) -> None:
    conn = sqlite3.connect(db, timeout=30, isolation_level=None)
    tries = 0

    def add(row: dict[str, Any]) -> dict[str, Any]:
        nonlocal tries
        tries += 1
        if tries == 1:
            both_read.wait()  # both clerks have read version 1: their writes conflict
        return {"balance": row["balance"] + amount}

    row = update_row(conn, "accounts", 1, add)
    print(f"clerk +{amount}: wrote balance {row['balance']} at version {row['version']}"
          f" after {tries} tries")  # fmt: skip
    conn.close()


def main(folder: Path) -> None:
    db = folder / "bank.db"
    with sqlite3.connect(db, isolation_level=None) as conn:
        conn.execute(
            "CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER, version INTEGER)"
        )
        conn.execute("INSERT INTO accounts VALUES (1, 100, 1)")
    both_read = threading.Barrier(2)
    clerks = [threading.Thread(target=clerk, args=(db, n, both_read)) for n in (10, 20)]
    for thread in clerks:
        thread.start()
    for thread in clerks:
        thread.join()
    balance, version = (
        sqlite3.connect(db).execute("SELECT balance, version FROM accounts").fetchone()
    )
    print(f"balance {balance} at version {version}: no update lost")

    # The same over tenure's store: a value in its records, updated by compare-and-set.
    with tenure.connect(f"sqlite:///{folder}/tenure.db") as client:
        counter = client.versioned("visits")
        for _ in range(3):
            counter.update(lambda value: json.dumps(json.loads(value or "0") + 1))
        print(f"visits: {counter.get()}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        main(Path(folder))
