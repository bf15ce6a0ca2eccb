"""The transport: a store URL as libpq's connection string (the common TLS and credential
options mapped onto libpq's, libpq's own passed through), connecting, and the command
connection every call runs on (`Commands`). Which option maps to which: docs/stores/postgres.md.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlunsplit

import anyio

from ..._errors import InvalidArgument, StoreUnavailable
from .._connect import ENV_PASSWORD, SECRET_QUERY, ConnectOptions, check, redact, scrub, url_options
from .._kit import Backoff, InDoubt, Unavailable, parse_url
from .._registry import BY_SCHEME

try:
    import psycopg
    from psycopg import errors as pg_errors
except ImportError:  # the 'postgres' extra is not installed: PostgresStore.from_url says so
    psycopg = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg.sql import Composed

T = TypeVar("T")
STORE = "PostgreSQL"
SCHEMES = BY_SCHEME["postgresql"].schemes
DEFAULT_SCHEMA = "tenure"
CONNECT_TIMEOUT = 5
"""Seconds to wait for a connection, unless the URL sets ``connect_timeout``."""
CALL_TIMEOUT = 10.0
"""Seconds one store call may take before the store is reported unavailable."""
RETRIES = 5
"""Times a call is retried after a deadlock or serialization failure."""
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
COMMON_TO_LIBPQ = {
    "ca": "sslrootcert",
    "cert": "sslcert",
    "key": "sslkey",
    "username": "user",
    "password": "password",
}
"""Each common connection option (``tenure.stores._connect``) and its libpq name."""
LIBPQ_EQUIVALENTS = frozenset((*COMMON_TO_LIBPQ.values(), "sslmode"))

Call = Callable[["AsyncConnection[Any]"], Awaitable[T]]
"""What `Commands.run` runs: one statement on the command connection."""
Row = tuple[Any, ...] | None


async def one(conn: AsyncConnection[Any], query: Composed, params: dict[str, Any]) -> Row:
    """``query``'s first row (None if it returns none)."""
    cur = await conn.execute(query, params)
    return await cur.fetchone() if cur.description is not None else None


def statement(query: Composed, params: dict[str, Any]) -> Call[Row]:
    """``query`` with ``params`` as a call for `Commands.run`: its first row."""

    async def call(conn: AsyncConnection[Any]) -> Row:
        return await one(conn, query, params)

    return call


class Transport:
    """How the store reaches its server: libpq's connection string (everything in it: host,
    TLS, credentials, libpq's options), and the one-line error of a failure."""

    def __init__(self, dsn: str, shown: str | None = None) -> None:
        """``dsn``: libpq's connection string (or URL); ``shown``: the URL to show, redacted
        here."""
        self.dsn = dsn
        self.shown = redact(shown if shown is not None else dsn)
        self.unavailable = Unavailable(
            f"{STORE} store {self.shown}", _secrets_in(dsn), CALL_TIMEOUT
        )
        self._add_connect_timeout = "connect_timeout" not in psycopg.conninfo.conninfo_to_dict(dsn)

    async def connect(self) -> AsyncConnection[Any]:
        """A new connection, in autocommit, within ``connect_timeout`` (`CONNECT_TIMEOUT` unless
        the URL sets one). psycopg's errors come out as they are."""
        if self._add_connect_timeout:
            return await psycopg.AsyncConnection.connect(
                self.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT
            )
        return await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)


class Commands:
    """The store's command connection: one call at a time, each one statement in autocommit;
    reopened (and set up: ``setup``) when broken; the cleanups in doubt first."""

    def __init__(
        self, transport: Transport, setup: Callable[[AsyncConnection[Any]], Awaitable[None]]
    ) -> None:
        self.transport = transport
        self._setup = setup
        self._lock = anyio.Lock()  # one command at a time on the command connection
        self.conn: AsyncConnection[Any] | None = None
        self.in_doubt: InDoubt[Call[object]] = InDoubt()
        """Releases and leaves whose outcome is in doubt (the store went away): done again,
        idempotently, one statement each, before the next call, so no lock stays held by
        nobody."""

    async def _connection(self) -> AsyncConnection[Any]:
        conn = self.conn
        if conn is not None and not conn.closed:
            return conn
        self.conn = None
        conn = await self.transport.connect()
        try:
            # Every call relies on READ COMMITTED (sql/functions.sql), whatever the server's
            # default; a client paused inside a transaction must not hold a name's row for long.
            await conn.execute(
                "SET default_transaction_isolation = 'read committed';"
                " SET idle_in_transaction_session_timeout = 10000"
            )
            await self._setup(conn)
        except BaseException:
            await conn.close()
            raise
        self.conn = conn
        return conn

    async def drop(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            with anyio.CancelScope(shield=True):
                await conn.close()

    async def run(self, fn: Call[T]) -> T:
        """Run ``fn(conn)`` on the command connection (reopened if needed).

        ``fn`` is one statement, in autocommit: its own transaction, one round trip. Every one
        is idempotent (a grant by its request id), so one that failed as a reused connection
        turned out dead (e.g. the server restarted) is sent once more on a fresh one; deadlocks
        and serialization failures (rolled back whole) are retried too. Owed cleanups go first.
        psycopg's errors come out as ``StoreUnavailable``; a call that fails or is interrupted
        drops the connection, so the next call starts from a fresh one in a known state.
        """
        async with self._lock:
            try:
                with anyio.fail_after(CALL_TIMEOUT):
                    reused = self.conn is not None
                    conn = await self._connection()
                    retries, backoff = 0, Backoff(first=0.002, most=0.032, jitter=False)
                    while True:
                        try:
                            while self.in_doubt:
                                cleanup = next(iter(self.in_doubt))
                                await cleanup(conn)
                                self.in_doubt.discard(cleanup)
                            return await fn(conn)
                        except (pg_errors.DeadlockDetected, pg_errors.SerializationFailure):
                            if retries == RETRIES:  # waits of 2, 4, … 32 ms, then the error
                                raise
                            retries += 1
                            await backoff.sleep()
                        except psycopg.OperationalError:
                            if not reused:
                                raise
                            await self.drop()
                            reused = False
                            conn = await self._connection()
            except StoreUnavailable:
                raise
            except (psycopg.Error, TimeoutError, OSError) as exc:
                await self.drop()
                raise self.transport.unavailable.of(exc) from exc
            except BaseException:
                await self.drop()
                raise

    async def fetch(self, query: Composed, params: dict[str, Any]) -> Row:
        """``query``'s first row, run as one call."""
        return await self.run(statement(query, params))


# -- the URL ---------------------------------------------------------------------------------


def conninfo(url: str, options: ConnectOptions) -> tuple[str, str]:
    """libpq's connection string for ``url`` and ``options`` (the common options become
    libpq's, libpq's own pass through), and the schema's name; one ``InvalidArgument`` for a
    mistake."""
    checked = parse_url(url, SCHEMES, STORE, "", fragment=None)
    parts = checked.parts
    try:
        parse_qsl(parts.query, keep_blank_values=True, strict_parsing=True)
    except ValueError as exc:
        raise checked.bad(str(exc)) from None
    if parts.fragment:
        raise checked.bad("no #fragment allowed")
    common, rest = url_options(url, STORE)
    schema, libpq, passthrough = _split_query(rest, checked.bad)
    params = _libpq_params(options.over(common), libpq)
    host = parts.netloc.rpartition("@")[2]  # user and password go as parameters
    dsn = urlunsplit((parts.scheme, host, parts.path, urlencode(passthrough), ""))
    try:
        return psycopg.conninfo.make_conninfo(dsn, **params), schema  # checked by libpq
    except psycopg.Error as exc:
        pairs = [*params.items(), *passthrough]
        hidden = [value for key, value in pairs if key in SECRET_QUERY]
        raise checked.bad(scrub(str(exc), hidden)) from None


def _split_query(
    pairs: list[tuple[str, str]], bad: Callable[[str], InvalidArgument]
) -> tuple[str, dict[str, str], list[tuple[str, str]]]:
    """The schema (checked), the libpq parameters that have a common name, and the rest."""
    schemas: list[str] = []
    libpq: dict[str, str] = {}
    rest: list[tuple[str, str]] = []
    for key, value in pairs:
        if key == "schema":
            schemas.append(value)
        elif key in LIBPQ_EQUIVALENTS:
            if libpq.get(key, value) != value:
                raise bad(f"{key} given twice")
            libpq[key] = value
        else:
            rest.append((key, value))
    if len(schemas) > 1:
        raise bad("schema given twice")
    return _check_schema(schemas[0] if schemas else DEFAULT_SCHEMA), libpq, rest


def _check_schema(schema: str) -> str:
    """``schema`` if it is a plain identifier of tenure's own, else one ``InvalidArgument``:
    it is spliced into SQL only through ``sql.Identifier``, but a name that needs quoting
    (or that PostgreSQL reserves) is a mistake to report, not to work around."""
    if not IDENTIFIER.fullmatch(schema):
        raise InvalidArgument(
            f"bad schema name {schema!r} in PostgreSQL store URL: use letters, digits"
            " and _ (not first), at most 63"
        )
    if schema.lower().startswith("pg_") or schema.lower() == "information_schema":
        raise InvalidArgument(f"bad schema name {schema!r}: reserved by PostgreSQL")
    return schema


def _libpq_params(options: ConnectOptions, libpq: dict[str, str]) -> dict[str, str]:
    """libpq's parameters for the common ``options`` merged with libpq's own names from the
    URL (``libpq``): one setting given under both names must agree; files are checked."""
    options = check(options, STORE)
    merged: dict[str, str | None] = {}
    for name, key in COMMON_TO_LIBPQ.items():
        ours, theirs = getattr(options, name), libpq.get(key)
        if ours is not None and theirs is not None and ours != theirs:
            what = f"{name} and {key}" if name != key else f"the two {name}s"
            raise InvalidArgument(f"{STORE} store: {what} disagree")
        merged[key] = ours if ours is not None else theirs
    if merged["password"] is None and os.environ.get(ENV_PASSWORD):
        merged["password"] = os.environ[ENV_PASSWORD]  # else libpq's PGPASSWORD or .pgpass
    root, cert = merged["sslrootcert"], merged["sslcert"]
    # libpq's own file names are checked as the common ones are: one line, before connecting.
    check(ConnectOptions(ca=None if root == "system" else root, cert=cert), STORE)
    merged["sslmode"] = _sslmode(options, libpq.get("sslmode"))
    if options.use_tls and root is None:
        merged["sslrootcert"] = _system_roots()
    return {key: value for key, value in merged.items() if value is not None}


def _sslmode(options: ConnectOptions, sslmode: str | None) -> str | None:
    """``tls=true`` is ``verify-full`` (always verify, as every store does), ``tls=false`` is
    ``disable``; ca, cert or key alone imply ``verify-full`` unless ``sslmode`` says more."""
    if options.tls is not None:
        wanted = "verify-full" if options.tls else "disable"
        if sslmode not in (None, wanted):
            raise InvalidArgument(f"{STORE} store: tls and sslmode disagree")
        return wanted
    if sslmode is None:
        return "verify-full" if options.use_tls else None
    if sslmode == "disable" and options.use_tls:
        raise InvalidArgument(f"{STORE} store: sslmode=disable contradicts ca, cert or key")
    return sslmode


def _system_roots() -> str | None:
    """The CA file of the system's roots that Python's ``ssl`` uses (and so every other
    store; ``$SSL_CERT_FILE`` if set); if it finds none, libpq's ``system`` (libpq >= 16),
    else None: libpq's own default, ``~/.postgresql/root.crt``."""
    cafile = ssl.get_default_verify_paths().cafile
    if cafile:
        return cafile
    return "system" if psycopg.pq.version() >= 160000 else None


def _secrets_in(dsn: str) -> list[str]:
    """The secrets written in a connection string."""
    try:
        found = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return []
    return [str(found[key]) for key in SECRET_QUERY if found.get(key)]
