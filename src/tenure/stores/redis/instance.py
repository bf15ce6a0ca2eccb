"""One Redis server, as both Redis stores use it: redis-py's connections (TLS, ACL login), the
Lua script (``lua/tenure.lua``, one operation per call) and the other reads, each error turned
into a one-line ``StoreUnavailable``. The keys and the script: docs/stores/redis.md."""

from __future__ import annotations

import contextlib
import json
import math
import ssl
from dataclasses import dataclass, replace
from importlib.resources import files
from typing import Any

import anyio

try:
    from redis import exceptions as redis_errors
    from redis.asyncio import BlockingConnectionPool, Redis
    from redis.asyncio.connection import SSLConnection
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
except ImportError:  # the 'redis' extra is not installed: check_driver says so
    Redis = None  # type: ignore[assignment,misc]
    SSLConnection = object  # type: ignore[assignment,misc]

from ..._errors import InvalidArgument, StoreUnavailable
from ..._values import LockDelay, LockInfo, Revocation
from .._connect import scrub, tls_failure
from .._kit import Unavailable, parse_owner, parse_revocation
from .url import RedisURL
from .wakeups import WakeUps

CALL_TIMEOUT = 5.0
"""Seconds one call may take (redis-py's socket timeout, set explicitly: blocking reads use a
second client without one, bounded by their own timeouts)."""
CONNECTIONS = 100
"""Connections for calls (redis-py's default cap). Past it a call waits for a free one, up to
its timeout, instead of failing with "Too many connections" (a thousand waiters of one client
all asking at once)."""
WAITING_CONNECTIONS = 10_000
"""Connections for blocking reads: one per session with waiters (`WakeUps`) and one per watch
waiting for an event. Past it a read waits for a free one. (The server's own default limit is
10,000 clients.)"""
EVENTS_KEPT = 100
SCRIPT = (
    (files(__package__) / "lua" / "tenure.lua")
    .read_text(encoding="utf-8")
    .replace("__KEPT__", str(EVENTS_KEPT))
)
_KEY_DENIED = "can't access at least one of the keys"
"""Redis 7.0's ACL refusal of a key inside a script (outside one: a NOPERM reply)."""
_NO_PASSWORD = "no password given (user:password@ in the URL, password= or $TENURE_PASSWORD)"


def check_driver() -> None:
    """``InvalidArgument`` if redis-py is not installed."""
    if Redis is None:
        raise InvalidArgument("the Redis stores need redis-py: pip install 'tenure[redis]'")


def ms(seconds: float) -> str:
    return str(max(1, math.ceil(seconds * 1000)))


def delay_ms(lock_delay: float) -> str:
    """A lock-delay in ms for the script, rounded up (never shorter); "0": none."""
    return str(max(0, math.ceil(lock_delay * 1000)))


def held_back_for(row: list[object]) -> float:
    """Seconds an ``attempt`` script's busy answer says the free name is still held back."""
    return int(str(row[9])) / 1000 if len(row) > 9 else 0.0


def busy_holder(name: str, row: list[object]) -> LockInfo | None:
    """The holder from an ``attempt`` script's busy answer."""
    _, _, token, owner, value, left, waiters = row[:7]
    if not token:
        return None
    expires = max(0.0, int(str(left)) / 1000)
    shown = None if not value else str(value)
    owned = parse_owner(owner if isinstance(owner, str) else None)[0]
    return LockInfo(name, int(str(token)), owned, expires, int(str(waiters)), shown)


def _closed_by_server(exc: BaseException) -> bool:
    """``exc`` (or what caused it) says the server hung up."""
    current: BaseException | None = exc
    for _ in range(10):  # a short chain: never follow a cycle
        if current is None:
            return False
        if isinstance(current, ConnectionResetError) or "closed by server" in str(current):
            return True
        current = current.__cause__ or current.__context__
    return False


@dataclass
class ServerErrors(Unavailable):
    """The kit's one-line error, ``Redis at host:port: …``, with what Redis's refusals mean: a
    refused login, an ACL's NOPERM, a plain server that waits for more of a TLS hello, a server
    that hangs up on a new connection."""

    address: str = ""
    user: str = "default"
    prefix: str = ""
    tls: bool = False
    closed_hint: str = ""

    def of(self, exc: BaseException) -> StoreUnavailable:
        if isinstance(exc, StoreUnavailable):
            return exc
        detail = scrub(str(exc), list(self.secrets)) or type(exc).__name__
        if isinstance(exc, redis_errors.AuthenticationError):
            refused = Unavailable(
                f"Redis authentication failed for user {self.user!r} at {self.address}"
            )
            return refused(detail if self.secrets else _NO_PASSWORD, whole=True)
        tls = tls_failure(exc)
        if tls is not None:
            why = tls
        elif isinstance(exc, redis_errors.NoPermissionError) or _KEY_DENIED in str(exc):
            why = (
                f"NOPERM: user {self.user!r} may not use the keys of prefix {self.prefix!r}"
                f" (its ACL must allow ~{self.prefix}:*)"
            )
        elif isinstance(exc, TimeoutError) and not str(exc):
            why = f"no answer within {CALL_TIMEOUT:g}s"
            if self.tls:  # a plain server reads a TLS hello as a command and waits for more
                why += " (does it speak TLS on this port?)"
        elif _closed_by_server(exc):
            why = f"{detail} ({self.closed_hint})"
        else:
            why = detail
        return self(why, whole=True)  # its driver text scrubbed above, the rest is ours


class TLSConnection(SSLConnection):
    """redis-py's TLS connection with tenure's context (`ConnectOptions.ssl_context`): given a
    ``ca``, only that CA is trusted (redis-py's own context would trust the system's roots too),
    and the server's certificate must name the host."""

    def __init__(self, *, tls_context: ssl.SSLContext, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ssl_context.context = tls_context  # used as is: redis-py builds none of its own


class Instance:
    """One Redis server: a client for calls, one for blocking reads, errors translated."""

    def __init__(self, url: RedisURL, host: str, port: int) -> None:
        self.address = f"{host}:{port}"
        self.prefix = url.prefix
        tls = url.options.use_tls
        common: dict[str, Any] = {
            "host": host,
            "port": port,
            "db": url.db,
            "username": url.options.username,
            "password": url.options.password,
            "decode_responses": True,
            "socket_connect_timeout": CALL_TIMEOUT,  # the TLS handshake included
            # One immediate retry: a pooled connection may be dead after a server restart. Every
            # operation of the script is idempotent, so a repeated call is harmless. A refused
            # login or handshake is retried once too, then reported: never retried for ever.
            "retry": Retry(NoBackoff(), 1),
        }
        if tls:  # the files are read now: a bad one fails before connecting
            common.update(connection_class=TLSConnection, tls_context=url.options.ssl_context())
        self.client = Redis.from_pool(
            BlockingConnectionPool(
                max_connections=CONNECTIONS,
                timeout=CALL_TIMEOUT,
                socket_timeout=CALL_TIMEOUT,
                **common,
            )
        )
        self.blocking = Redis.from_pool(  # its callers bound each wait with a cancel scope
            BlockingConnectionPool(
                max_connections=WAITING_CONNECTIONS, timeout=None, socket_timeout=None, **common
            )
        )
        self.script = self.client.register_script(SCRIPT)
        # Why a server may hang up on a new connection, said when one does: TLS 1.3 refuses a
        # missing client certificate after the handshake, so the client sees only a reset.
        closed_hint = "does it speak TLS only? use rediss://"
        if tls and not url.options.cert:
            closed_hint = "does it demand a client certificate? give cert= and key="
        elif tls:
            closed_hint = "does it trust this client certificate?"
        self.errors = ServerErrors(
            f"Redis at {self.address}",
            url.options.secrets(),
            CALL_TIMEOUT,
            address=self.address,
            user=url.user,
            prefix=url.prefix,
            tls=tls,
            closed_hint=closed_hint,
        )
        self._failing = (redis_errors.RedisError, OSError, TimeoutError)
        self.wake_ups = WakeUps(self.blocking, lambda sid: self.key("w", sid), self._failing)
        """The hand-overs pushed to this client's sessions (a waiter's ``wait``)."""

    def key(self, kind: str, ident: str) -> str:
        return f"{self.prefix}:{kind}:{ident}"

    async def call(self, op: str, *args: str, timeout: float = CALL_TIMEOUT) -> Any:
        """One operation of the script (``op``, then its arguments)."""
        with self.errors.on(*self._failing), anyio.fail_after(timeout):
            return await self.script(keys=[], args=[op, self.prefix, *args])

    async def lock_names(self, kind: str = "l") -> list[str]:
        """The names that have a key of ``kind``: ``l`` the locks, ``h`` the hold-backs."""
        start = len(self.key(kind, ""))
        names = []
        with self.errors.on(*self._failing), anyio.fail_after(CALL_TIMEOUT * 4):
            # SCAN ignores the ACL's key patterns: touch a key of the prefix first, so a
            # user who may not use this prefix is refused here, not shown its lock names.
            await self.client.exists(self.key("c", ""))
            async for key in self.client.scan_iter(match=self.key(kind, "*"), count=1000):
                names.append(str(key)[start:])
        return sorted(set(names))

    async def info(self, name: str) -> LockInfo | None:
        row = await self.call("info", name)
        if not row:
            return None
        token, owner, value, left, waiters = row[:5]
        expires = max(0.0, int(left) / 1000)
        return LockInfo(name, int(token), parse_owner(owner)[0], expires, int(waiters), value)

    async def held(self, name: str) -> LockDelay | None:
        """The hold-back of ``name`` on this server, if it is free and held back."""
        row = await self.call("held", name)
        if not row:
            return None
        token = int(row[0] or 0)
        kept, _, record = str(row[2] or "").partition(" ")  # a revocation's: "<token> <json>"
        revoked = revocation_of(record, token) if kept == str(token) else None
        return LockDelay(name, token, int(row[1]) / 1000, revoked)

    async def last_event(self, name: str) -> str:
        """The id of the last event of ``name`` (``0-0``: none yet)."""
        with self.errors.on(*self._failing), anyio.fail_after(CALL_TIMEOUT):
            last = await self.client.xrevrange(self.key("e", name), count=1)
        return str(last[0][0]) if last else "0-0"

    async def read_events(
        self, name: str, after: str, timeout: float
    ) -> list[tuple[str, dict[str, str]]]:
        """Events of ``name`` after the id ``after``, waiting up to ``timeout`` for one."""
        key = self.key("e", name)
        block = int(timeout * 1000)
        answer: Any
        with self.errors.on(*self._failing):
            if block <= 0:  # XREAD BLOCK 0 would wait for ever
                with anyio.fail_after(CALL_TIMEOUT):
                    answer = await self.client.xread({key: after}, count=EVENTS_KEPT)
            else:
                with anyio.fail_after(timeout + CALL_TIMEOUT):
                    answer = await self.blocking.xread({key: after}, count=EVENTS_KEPT, block=block)
        if not answer:
            return []
        return [(str(ident), dict(fields)) for ident, fields in answer[0][1]]

    async def aclose(self) -> None:
        await self.wake_ups.aclose()
        for client in (self.client, self.blocking):
            with contextlib.suppress(redis_errors.RedisError, OSError):
                await client.aclose()


def revocation_of(record: str, token: int) -> Revocation | None:
    """The revocation kept as JSON by the script's ``revoke``, with the token it ended."""
    try:
        revoked = parse_revocation(json.loads(record))
    except ValueError:
        return None
    return None if revoked is None else replace(revoked, token=token)
