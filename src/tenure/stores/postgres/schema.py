"""The SQL of one schema of tenure's tables (package data in ``sql/``: the tables, the records
table, the server-side functions, the statements of the calls), and `Schema.ensure`: create
the schema, or upgrade an older version in place."""

from __future__ import annotations

from importlib.resources import files
from typing import TYPE_CHECKING, Any

from .._kit import Unavailable
from .connection import one

try:
    from psycopg import errors as pg_errors
    from psycopg import sql
except ImportError:  # the 'postgres' extra is not installed: PostgresStore.from_url says so
    sql = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg.sql import Composed

SCHEMA_VERSION = 4
"""1: tables only, every call a multi-statement transaction. 2: adds ``locks.request`` and the
server-side functions. 3: leader election: ``locks.value``, ``watchers``, and changes announced
by NOTIFY; later, within version 3, the ``records`` table (added on connecting if missing: a
table that older clients never touch). 4: lock-delay: ``sessions.lock_delay``, ``held`` and its
trigger. Older schemas are upgraded in place (`Schema.ensure`)."""
SETUP_LOCK = 0x7465_6E75_7265  # 'tenure': one advisory lock serialises schema creation


def read_sql(name: str) -> str:
    """The text of ``sql/<name>``."""
    return (files(__package__) / "sql" / name).read_text(encoding="utf-8")


def one_line(text: str) -> str:
    """A statement's text without its comment lines, on one line."""
    lines = (line.strip() for line in text.splitlines())
    return " ".join(line for line in lines if line and not line.startswith("--"))


def _named(text: str) -> dict[str, str]:
    """The blocks of ``text`` under their ``-- name: NAME`` lines, each on one line."""
    blocks: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("-- name:"):
            lines = blocks.setdefault(line.removeprefix("-- name:").strip(), [])
        else:
            lines.append(line)
    return {name: one_line("\n".join(body)) for name, body in blocks.items()}


RECORDS = read_sql("records.sql")
REVOKE = read_sql("revoke.sql")
SETUP = (
    read_sql("tables.sql") + RECORDS + read_sql("functions.sql") + REVOKE + read_sql("version.sql")
)
"""Creates the schema, or upgrades an older one in place (one transaction)."""
QUERIES = {**_named(read_sql("queries.sql")), "records": RECORDS, "revoke_setup": REVOKE}
"""The statements of the store's calls, by name."""


class Schema:
    """One schema of tenure's tables (``name``: checked, a plain identifier): the statements
    of the calls over it (`q`), and `ensure`."""

    def __init__(self, name: str, unavailable: Unavailable) -> None:
        self.name = name
        self._unavailable = unavailable
        ident = sql.Identifier(name)
        self.q: dict[str, Composed] = {k: sql.SQL(v).format(s=ident) for k, v in QUERIES.items()}
        version = sql.Literal(str(SCHEMA_VERSION))
        self._setup = sql.SQL(SETUP).format(s=ident, version=version)

    async def ensure(self, conn: AsyncConnection[Any]) -> None:
        """Create the schema, or upgrade an older version in place; refuse a newer version.

        Version 1 -> 2 adds a nullable column and the functions, nothing else: a client of
        version 1 still connected keeps working beside version 2 (same tables, same per-name
        row lock; it ignores the NOTIFY payload), and a version-1 client connecting afterwards
        is refused by its own version check. Version 2 -> 3 adds a nullable column, a table and
        functions, and replaces the bodies of the others, keeping their signatures: a version-2
        client still connected keeps working (its changes are announced too); one connecting
        afterwards is refused. The ``records`` table came later within version 3 (a table that
        no older client touches, so the version stays): it is created here if it is missing.
        Version 3 -> 4 (lock-delay) adds a column with a default, a table and a trigger, and
        replaces function bodies, keeping their signatures: a version-3 client still connected
        keeps working and is held back like any other (the functions and the trigger judge);
        its own sessions have no lock-delay. The ``revocations`` table and the ``revoke``
        function came later within version 4 (nothing older touches them): created here if
        missing. A client older than them is not told of a revocation of its grant: its lock
        row is gone (``holds`` refuses its token at once), but it learns only at release.
        """
        try:
            found = await self._version(conn)
        except (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName):
            found = 0
        if found < SCHEMA_VERSION:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (SETUP_LOCK,))
                has_meta = await one(conn, self.q["has_table"], self._table("meta"))
                found = await self._version(conn) if has_meta and has_meta[0] else 0
                if found < SCHEMA_VERSION:
                    await conn.execute(self._setup)
            found = await self._version(conn)
        if found != SCHEMA_VERSION:
            raise self._unavailable(
                f"schema {self.name!r} has version {found},"
                f" this tenure knows version {SCHEMA_VERSION}"
            )
        has_records = await one(conn, self.q["has_table"], self._table("records"))
        if not (has_records and has_records[0]):
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (SETUP_LOCK,))
                await conn.execute(self.q["records"])
        has_revocations = await one(conn, self.q["has_table"], self._table("revocations"))
        if not (has_revocations and has_revocations[0]):  # within version 4, as records
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (SETUP_LOCK,))
                await conn.execute(self.q["revoke_setup"])

    def _table(self, table: str) -> dict[str, str]:
        return {"schema": self.name, "table": table}

    async def _version(self, conn: AsyncConnection[Any]) -> int:
        row = await (await conn.execute(self.q["version"])).fetchone()
        return int(row[0]) if row is not None else 0
