"""The PostgreSQL store: ``postgresql://user@host:5432/db?schema=tenure`` (``postgres://`` too).

Locks, sessions, queues, records and leader election in tables of one schema, every call one
statement (most of them a server-side function), expiry and lock-delay by the server's clock,
waiters and watches woken by LISTEN/NOTIFY. The parts: ``connection`` (the URL as libpq's
connection string, connecting, the command connection), ``schema`` and ``sql/`` (the SQL),
``listener`` (the LISTEN/NOTIFY multiplexer), ``watch``, ``store`` (the contract's calls) and
``guard`` (a caller's writes made only while a lock is held). Design notes:
docs/stores/postgres.md.
"""

from .connection import DEFAULT_SCHEMA
from .store import PostgresStore

__all__ = ["DEFAULT_SCHEMA", "PostgresStore"]
