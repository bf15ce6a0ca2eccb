"""Charging a card once: an idempotency key, kept under a unique constraint, no lock.

The client sends a key with its request (``Idempotency-Key: order-7``) and sends the same key
when it retries. The first request with the key runs and its answer is stored; a retry gets
the stored answer without charging again; the same key with another request (another amount)
is refused. Shown twice: in your own database (`SQLIdempotency`, a table whose primary key is
the idempotency key) and over tenure's store (``@client.idempotent``).

    python examples/no_lock/charge_once.py
"""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

import tenure
from tenure.idempotency import SQLClaim, SQLIdempotency, fingerprint

charges: list[str] = []  # what the card network saw


def charge_card(order: str, cents: int) -> dict[str, object]:
    charges.append(order)
    return {"order": order, "cents": cents, "charge": f"ch_{len(charges)}"}


def main(folder: Path) -> None:
    # 1. In your own database: the idempotency key is the table's primary key.
    db = sqlite3.connect(folder / "shop.db", isolation_level=None)
    keys = SQLIdempotency()
    keys.ensure_table(db)
    request = {"order": "order-7", "cents": 500}

    def handle(claim: SQLClaim) -> dict[str, object]:
        return charge_card("order-7", 500)

    for attempt in (1, 2):  # the client retries: its first answer was lost on the way
        answer = keys.run(db, "order-7", fingerprint(request), handle)
        print(f"sql attempt {attempt}: {answer['charge']}")
    try:
        keys.run(db, "order-7", fingerprint({**request, "cents": 900}), handle)
    except tenure.KeyReused as refused:
        print(f"sql, another amount: refused ({type(refused).__name__})")

    # 2. Over tenure's store: a decorator, the key from an argument, the fingerprint from all.
    with tenure.connect(f"sqlite:///{folder}/tenure.db") as client:

        @client.idempotent("charges", key=lambda order, cents: order)
        def charge(order: str, cents: int) -> dict[str, object]:
            return charge_card(order, cents)

        for attempt in (1, 2):
            print(f"store attempt {attempt}: {charge('order-8', 700)['charge']}")
        try:
            charge("order-8", 900)
        except tenure.KeyReused as refused:
            print(f"store, another amount: refused ({type(refused).__name__})")
    print(f"the card was charged {len(charges)} times for 2 orders")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        main(Path(folder))
