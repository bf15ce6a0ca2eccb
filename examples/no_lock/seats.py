"""Not selling one seat twice: a conditional update, no lock.

Two buyers ask for seat 12A at the same moment. Each sale is one UPDATE that changes the row
only if the seat is still free; the database applies the two one after the other, so exactly
one of them changes a row and the other is told the seat is gone. (A unique constraint on
``tickets(seat)`` does the same when a sale inserts a row instead.)

    python examples/no_lock/seats.py
"""

from __future__ import annotations

import sqlite3
import tempfile
import threading
from pathlib import Path


def sell(db: Path, seat: str, buyer: str, start: threading.Barrier, sold: dict[str, bool]) -> None:
    conn = sqlite3.connect(db, timeout=30, isolation_level=None)
    start.wait()  # both buyers ask at once
    changed = conn.execute(
        "UPDATE seats SET buyer = ? WHERE seat = ? AND buyer IS NULL", (buyer, seat)
    ).rowcount
    sold[buyer] = changed == 1
    conn.close()


def main(folder: Path) -> None:
    db = folder / "theatre.db"
    with sqlite3.connect(db, isolation_level=None) as conn:
        conn.execute("CREATE TABLE seats (seat TEXT PRIMARY KEY, buyer TEXT)")
        conn.execute("INSERT INTO seats (seat) VALUES ('12A')")
    start, sold = threading.Barrier(2), {}
    buyers = [threading.Thread(target=sell, args=(db, "12A", b, start, sold)) for b in "ab"]
    for thread in buyers:
        thread.start()
    for thread in buyers:
        thread.join()
    for buyer, ok in sorted(sold.items()):
        print(f"buyer {buyer}: {'sold 12A' if ok else 'seat 12A is gone'}")
    (owner,) = sqlite3.connect(db).execute("SELECT buyer FROM seats").fetchone()
    print(f"seat 12A belongs to buyer {owner}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        main(Path(folder))
