"""Writes guarded by a lock, in the store's own file: the SQL test that a token holds it."""

from __future__ import annotations

from ..._clock import REAL_CLOCK
from .schema import boot_id, live


def holds(name: str, token: int) -> tuple[str, dict[str, object]]:
    """An SQL predicate that is true while ``token`` holds the lock ``name``, as the store itself
    judges a holder (a lock row with that token whose session is live: written in this boot
    and not expired by the boot clock, read at this call), and its parameter values. The
    parameters are named ``tenure_…``, so they cannot collide with the caller's own.

    Call it, and run the statement that uses it, inside the caller's ``BEGIN IMMEDIATE``
    transaction on the store's file: that is the store's one write lock, which every grant,
    hand-over, release and sweep takes too, so no grant can commit between the check and the
    caller's commit (and the clock is read with the lock held, as the store reads it)::

        db.execute("BEGIN IMMEDIATE")
        held, params = holds("orders", token)
        cur = db.execute(f"UPDATE stock SET n = :n WHERE {held}", {"n": 5, **params})
        # cur.rowcount == 0: the token no longer holds the lock, nothing was written
        db.execute("COMMIT")
    """
    predicate = (
        "EXISTS (SELECT 1 FROM tenure_locks l JOIN tenure_sessions s ON s.id = l.session"
        " WHERE l.name = :tenure_name AND l.token = :tenure_token AND " + live("tenure_") + ")"
    )
    params: dict[str, object] = {
        "tenure_name": name,
        "tenure_token": token,
        "tenure_boot": boot_id(),
        "tenure_now": REAL_CLOCK.now(),
    }
    return predicate, params
