"""Idempotency keys: a request runs once, and a retry of it gets the first answer.

Two back ends, one contract (docs/no-lock.md):

- over tenure's store: ``client.idempotent(scope, key, fingerprint=...)`` (`tenure.Idempotent`),
  a handle like every other, and its decorator form;
- in your own SQL database, by a unique constraint: `SQLIdempotency`, below.

`fingerprint` makes the fingerprint of a request, for both.

`SQLIdempotency` keeps one table beside your data::

    key TEXT PRIMARY KEY, fingerprint TEXT, state TEXT, token BIGINT, result TEXT, expires_at

A claim is an INSERT: the primary key refuses a second claimant. A claim whose worker died
(its ``expires_at`` passed while ``running``) is taken over by a conditional UPDATE that raises
the token, and completion is ``UPDATE … WHERE key = ? AND token = ?``: the dead worker's late
completion changes no row and is refused with `tenure.StaleToken`. Time is the database's own
(PostgreSQL's ``clock_timestamp()``, the SQLite host's clock), never a client's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from . import _dbapi
from ._errors import InvalidArgument, KeyReused, NotAcquired
from ._idempotent import DEFAULT_RETENTION, MAX_RESULT_BYTES, fingerprint, seconds
from ._once import check_slot
from .fence._tokens import refused

__all__ = ["SQLClaim", "SQLIdempotency", "fingerprint"]

T = TypeVar("T")


@dataclass(frozen=True)
class SQLClaim:
    """The outcome of `SQLIdempotency.claim`: true (``claimed``) if this worker is to run the
    request, with its ``token``; falsy if ``done`` (``result`` is the stored result: a replay)
    or ``running`` (another worker's claim is live)."""

    key: str
    state: Literal["claimed", "done", "running"]
    token: int
    result: Any = None

    def __bool__(self) -> bool:
        return self.state == "claimed"


class SQLIdempotency:
    """Idempotency keys in one table of the caller's database (sqlite3 or psycopg 3, sync).
    ``ttl``: seconds a claim is trusted before another worker may take it over (longer than the
    request takes); ``retention``: seconds a stored result is replayed."""

    def __init__(
        self,
        table: str = "tenure_idempotency",
        *,
        ttl: float = 300.0,
        retention: float = DEFAULT_RETENTION,
    ) -> None:
        self.table = _dbapi.table_name(table)
        self.ttl = seconds("ttl", ttl, positive=True)
        self.retention = seconds("retention", retention, positive=False)

    def __repr__(self) -> str:
        return f"SQLIdempotency(table={self.table!r})"

    def ensure_table(self, conn: Any) -> None:
        """Create the table if it is missing (in a transaction of its own)."""
        with _dbapi.transaction(conn) as cur:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {self.table} (key TEXT PRIMARY KEY,"
                " fingerprint TEXT NOT NULL, state TEXT NOT NULL, token BIGINT NOT NULL,"
                " result TEXT, expires_at DOUBLE PRECISION NOT NULL)"
            )

    def claim(self, conn: Any, key: str, fingerprint: str) -> SQLClaim:
        """Claim ``key`` for the request whose fingerprint is ``fingerprint``, in a transaction
        of its own: a new key (or one whose result expired) is claimed with token 1 (or the
        next); a key whose claim expired is taken over with a higher token; a key done is a
        replay. `tenure.KeyReused` if the key was first used for another request."""
        check_slot(key)
        if not isinstance(fingerprint, str):
            raise InvalidArgument(f"fingerprint must be a string, got {fingerprint!r}")
        d, t = _dbapi.dialect(conn), self.table
        with _dbapi.transaction(conn) as cur:
            cur.execute(
                f"INSERT INTO {t} (key, fingerprint, state, token, result, expires_at)"
                f" VALUES ({d.p}, {d.p}, 'running', 1, NULL, {d.now} + {d.p})"
                " ON CONFLICT (key) DO NOTHING RETURNING token",
                (key, fingerprint, self.ttl),
            )
            if _dbapi.rows(cur):  # the unique constraint let this claimant in
                return SQLClaim(key, "claimed", 1)
            cur.execute(
                f"SELECT fingerprint, state, token, result, expires_at <= {d.now}"
                f" FROM {t} WHERE key = {d.p}",
                (key,),
            )
            first, state, token, result, expired = _dbapi.rows(cur)[0]
            if first != fingerprint and not (state == "done" and expired):
                raise KeyReused(key, fingerprint, first)
            if state == "done" and not expired:
                return SQLClaim(key, "done", token, json.loads(result))
            if not expired:
                return SQLClaim(key, "running", token)
            # A dead worker's claim, or a result past its retention: take the key over.
            cur.execute(
                f"UPDATE {t} SET fingerprint = {d.p}, state = 'running', token = token + 1,"
                f" result = NULL, expires_at = {d.now} + {d.p}"
                f" WHERE key = {d.p} AND token = {d.p} RETURNING token",
                (fingerprint, self.ttl, key, token),
            )
            taken = _dbapi.rows(cur)  # one statement: the token is what it read, or no row
            if not taken:  # another claimant took it over first
                return SQLClaim(key, "running", token)
            return SQLClaim(key, "claimed", taken[0][0])

    def complete(self, conn: Any, claim: SQLClaim, result: Any) -> SQLClaim:
        """Store ``result`` (JSON-serialisable, at most 64 KiB) for ``claim``'s key, for
        ``retention`` seconds, in a transaction of its own, only if the claim's token is still
        the key's; `tenure.StaleToken` if the key was taken over since (nothing written)."""
        if not claim:
            raise InvalidArgument(f"key {claim.key!r} was not claimed here ({claim.state})")
        try:
            text = json.dumps(result, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(f"the result must be JSON-serialisable: {exc}") from None
        if len(text.encode()) > MAX_RESULT_BYTES:
            raise InvalidArgument(f"the result is larger than {MAX_RESULT_BYTES} bytes as JSON")
        d, t = _dbapi.dialect(conn), self.table
        with _dbapi.transaction(conn) as cur:
            cur.execute(
                f"UPDATE {t} SET state = 'done', result = {d.p}, expires_at = {d.now} + {d.p}"
                f" WHERE key = {d.p} AND token = {d.p} AND state = 'running' RETURNING token",
                (text, self.retention, claim.key, claim.token),
            )
            if not _dbapi.rows(cur):
                cur.execute(f"SELECT token FROM {t} WHERE key = {d.p}", (claim.key,))
                found = _dbapi.rows(cur)
                highest = found[0][0] if found else claim.token
                raise refused(type(self).__name__, claim.key, claim.token, highest)
        return SQLClaim(claim.key, "done", claim.token, json.loads(text))

    def abandon(self, conn: Any, claim: SQLClaim) -> None:
        """Give ``claim`` up without a result (the request failed): the next claim of the key
        takes it over at once, with a higher token. Nothing happens if it was taken over."""
        if not claim:
            return
        d = _dbapi.dialect(conn)
        with _dbapi.transaction(conn) as cur:
            cur.execute(
                f"UPDATE {self.table} SET expires_at = {d.now}"
                f" WHERE key = {d.p} AND token = {d.p} AND state = 'running'",
                (claim.key, claim.token),
            )

    def run(self, conn: Any, key: str, fingerprint: str, request: Callable[[SQLClaim], T]) -> T:
        """Run ``request(claim)`` once for ``key`` and store what it returns; a replay returns
        the stored result (the JSON round trip: every call returns the same). An exception
        stores nothing (the next call runs it again); ``NotAcquired`` if another worker's claim
        of the key is live."""
        claim = self.claim(conn, key, fingerprint)
        if claim.state == "running":
            raise NotAcquired(f"idempotency key {key!r} is being run by another worker now")
        if claim:
            try:
                result = request(claim)
            except BaseException:
                self.abandon(conn, claim)
                raise
            claim = self.complete(conn, claim, result)
        return claim.result  # type: ignore[no-any-return]
