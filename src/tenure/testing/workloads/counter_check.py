"""Reads what the protected resource accepted and names every violation it finds."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from tenure.fence import SQLFence


@dataclass
class Report:
    accepted: int
    final: int
    lost_updates: list[str] = field(default_factory=list)
    stale_tokens: list[str] = field(default_factory=list)

    @property
    def violations(self) -> list[str]:
        problems = self.lost_updates + self.stale_tokens
        if self.final != self.accepted:
            problems.append(f"final value {self.final} != {self.accepted} accepted writes")
        return problems


def check_counter(resource: str) -> Report:
    db = sqlite3.connect(resource)
    rows = db.execute("SELECT token, pid, old, new FROM accepted ORDER BY seq").fetchall()
    (final,) = db.execute("SELECT value FROM counter").fetchone()
    db.close()
    report = Report(accepted=len(rows), final=final)
    previous_new, highest = 0, 0
    for token, pid, old, new in rows:
        if old != previous_new:
            report.lost_updates.append(
                f"pid {pid} token {token} wrote {new} over a read of {old}, but the value was "
                f"{previous_new}: an update was lost"
            )
        if token < highest:
            report.stale_tokens.append(f"token {token} accepted after token {highest}")
        previous_new, highest = new, max(highest, token)
    return report


def make_counter(resource: str) -> None:
    db = sqlite3.connect(resource, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE counter (value INTEGER NOT NULL)")
    db.execute("INSERT INTO counter VALUES (0)")
    SQLFence().ensure_table(db)
    db.execute(
        "CREATE TABLE accepted (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
        " token INTEGER, pid INTEGER, old INTEGER, new INTEGER)"
    )
    db.close()
