"""What the Redis stores share: the URL, one server's connections, and the Lua script.

The whole protocol of one Redis server is one Lua script (``SCRIPT``, one operation per call), so
every store call is one atomic round trip; ``RedisStore`` runs it on one server, ``RedlockStore``
on each of N independent servers. Keys, under a prefix (``?prefix=``, default ``tenure``):

- ``P:s:<sid>`` the session: the owner's JSON, ``PX`` = TTL; it dies when not kept alive.
- ``P:n:<sid>`` hash name → count of the session's grants and queue places on that name, so
  ``keep_alive`` renews them (same script) and ``close`` releases them.
- ``P:l:<name>`` the lock: hash ``s`` session, ``t`` token, ``r`` request id (the attempt that won
  it), ``q`` its queue score, ``o`` owner, ``v`` proclaimed value. Created only when absent (the
  ``SET NX`` of the classic recipe, as a hash so the owner and value sit beside the token), with
  ``PX`` = the holder session's time left: a lock never outlives its session.
- ``P:c:<name>`` the fencing counter (``INCR``): never deleted, never expires.
- ``P:q:<name>`` the waiters: a sorted set of request ids (``<sid>/<n>``) by arrival (score: the
  server's ``TIME`` in µs, strictly increasing per queue; Redlock passes its own). A waiter is
  live while its session key is; dead ones are dropped when they reach the head.
- ``P:w:<rid>`` a waiter's wake-up list: a hand-over pushes the token there, the waiter
  blocks on it (``BLPOP``).
- ``P:d:<sid>`` the session's lock-delay in ms (absent: none), ``PX`` = TTL like the session.
- ``P:h:<name>`` the hold-back (lock-delay, DESIGN rule 8): the holder's token, ``PX`` = the
  holder session's time left + its lock-delay, set with each grant and renewal of a holder
  with a lock-delay, deleted by a release and by ``close``. While it lives and nobody holds the
  lock, the name is granted to nobody (waiters queue and keep their places); it outlives its
  session by exactly the lock-delay, on the server's clock.
- ``P:e:<name>`` the lock's events (a stream, ``XADD``): every grant, value and release, for
  watches; trimmed to about ``EVENTS_KEPT`` entries and expiring a day after the last one.

Every operation is idempotent for the same request id, so a retried call finds its own effect.

The prefix admits no ``:`` and no glob character, so the ACL key pattern ``~P:*`` is exactly
one prefix's keys; the script builds every key from ``P`` (declaring none), and Redis checks
each of its ``redis.call`` against the user's key patterns.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlencode, urlsplit

import anyio

try:
    from redis import exceptions as redis_errors
    from redis.asyncio import ConnectionPool, Redis
    from redis.asyncio.connection import SSLConnection
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
except ImportError:  # the 'redis' extra is not installed: parse_url says so
    Redis = None  # type: ignore[assignment,misc]
    SSLConnection = object  # type: ignore[assignment,misc]

from .._errors import InvalidArgument, StoreUnavailable
from ._connect import (
    NO_OPTIONS,
    TLS_OPTIONS,
    ConnectOptions,
    parse_hosts,
    redact,
    resolve,
    scrub,
    tls_failure,
)
from ._spi import Change, HeldBack, LockInfo, Owner

DEFAULT_PORT = 6379
DEFAULT_PREFIX = "tenure"
CALL_TIMEOUT = 5.0
"""Seconds one call may take (redis-py's socket timeout, set explicitly: blocking reads use a
second client without one, bounded by their own timeouts)."""
EVENTS_KEPT = 100
_PREFIX = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
_KEY_DENIED = "can't access at least one of the keys"
"""Redis 7.0's ACL refusal of a key inside a script (outside one: a NOPERM reply)."""

SCRIPT = r"""
local op, P = ARGV[1], ARGV[2]
local function key(kind, id) return P .. ':' .. kind .. ':' .. id end

local function alive(sid) return redis.call('exists', key('s', sid)) == 1 end
local function left(sid) return redis.call('pttl', key('s', sid)) end
local function delay(sid) return tonumber(redis.call('get', key('d', sid))) or 0 end

-- Ms the free name is still held back by lock-delay (0: not held back).
local function held_back(name) return math.max(0, redis.call('pttl', key('h', name))) end

-- Each change of a lock goes to its event stream, for watches.
local function note(name, fields)
  local e = key('e', name)
  redis.call('xadd', e, 'MAXLEN', '~', __KEPT__, '*', unpack(fields))
  redis.call('pexpire', e, 86400000)
end

-- The session's count of grants and queue places on a name.
local function involve(sid, name, delta)
  local n = key('n', sid)
  if redis.call('hincrby', n, name, delta) <= 0 then redis.call('hdel', n, name) end
  local ms = left(sid)
  if ms > 0 then redis.call('pexpire', n, ms) end
end

-- The lock's fields if its holder's session lives; a dead holder's lock is deleted.
local function holder(name)
  local l = key('l', name)
  local h = redis.call('hmget', l, 's', 't', 'r', 'q', 'o', 'v')
  if not h[1] then return nil end
  if not alive(h[1]) then
    redis.call('del', l)
    note(name, {'was', h[2]})
    return nil
  end
  return h
end

-- Grant a free lock: the counter is raised (and above floor), the lock lives as its session.
local function grant(name, sid, rid, score, floor)
  local c = key('c', name)
  local t = redis.call('incr', c)
  if t <= floor then t = floor + 1; redis.call('set', c, t) end
  local owner = redis.call('get', key('s', sid))
  local l = key('l', name)
  redis.call('hset', l, 's', sid, 't', t, 'r', rid, 'q', score, 'o', owner)
  local ms, d = math.max(1, left(sid)), delay(sid)
  redis.call('pexpire', l, ms)
  if d > 0 then redis.call('set', key('h', name), t, 'PX', ms + d)
  else redis.call('del', key('h', name)) end
  redis.call('del', key('w', rid))
  note(name, {'t', t, 's', sid, 'o', owner})
  return t
end

-- The first live waiter (request id, session id, score); dead ones are dropped.
local function first(name)
  local q = key('q', name)
  while true do
    local top = redis.call('zrange', q, 0, 0, 'WITHSCORES')
    if #top == 0 then return nil end
    local sid = string.match(top[1], '^([^/]+)/')
    if sid and alive(sid) then return top[1], sid, top[2] end
    redis.call('zrem', q, top[1])
  end
end

-- The lock is free: grant it to the first live waiter and wake that waiter only (not while
-- held back: then the first waiter to ask again after the delay hands it over).
local function hand_over(name)
  if held_back(name) > 0 then return end
  local rid, sid, score = first(name)
  if not rid then return end
  redis.call('zrem', key('q', name), rid)
  local t = grant(name, sid, rid, score, 0)
  local w = key('w', rid)
  redis.call('rpush', w, t)
  redis.call('pexpire', w, math.max(1, left(sid)))
end

-- A queue score after every score in the queue (server time in µs).
local function next_score(q)
  local now = redis.call('time')
  local s = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local last = redis.call('zrange', q, -1, -1, 'WITHSCORES')
  if #last > 0 and tonumber(last[2]) >= s then s = tonumber(last[2]) + 1 end
  return string.format('%d', s)
end

local function queue(sid, q, score, rid)
  redis.call('zadd', q, score, rid)
  local ms = left(sid)
  if redis.call('pttl', q) < ms then redis.call('pexpire', q, ms) end
end

if op == 'open' then  -- sid ttl owner lock-delay
  redis.call('set', key('s', ARGV[3]), ARGV[5], 'PX', ARGV[4])
  if (tonumber(ARGV[6]) or 0) > 0 then
    redis.call('set', key('d', ARGV[3]), ARGV[6], 'PX', ARGV[4])
  end
  return 1

elseif op == 'renew' then  -- sid ttl: the session and all it holds or waits for
  local sid, ttl = ARGV[3], tonumber(ARGV[4])
  if redis.call('pexpire', key('s', sid), ttl) == 0 then return 0 end
  redis.call('pexpire', key('d', sid), ttl)
  local d = delay(sid)
  local renewed = {'ok'}  -- and the names of the locks renewed (Redlock counts them)
  local n = key('n', sid)
  for _, name in ipairs(redis.call('hkeys', n)) do
    local l = key('l', name)
    local h = redis.call('hmget', l, 's', 't')
    if h[1] == sid then
      redis.call('pexpire', l, ttl)
      if d > 0 then redis.call('set', key('h', name), h[2], 'PX', ttl + d) end
      renewed[#renewed + 1] = name
    end
    local q = key('q', name)
    if redis.call('pttl', q) < ttl then redis.call('pexpire', q, ttl) end
  end
  redis.call('pexpire', n, ttl)
  return renewed

elseif op == 'close' then  -- sid
  local sid = ARGV[3]
  redis.call('del', key('s', sid), key('d', sid))
  local n = key('n', sid)
  for _, name in ipairs(redis.call('hkeys', n)) do
    local l = key('l', name)
    local h = redis.call('hmget', l, 's', 't')
    if h[1] == sid then
      redis.call('del', l, key('h', name))
      note(name, {'was', h[2]})
      hand_over(name)
    end
  end
  redis.call('del', n)
  return 1

elseif op == 'attempt' then  -- sid name rid enqueue score floor
  local sid, name, rid = ARGV[3], ARGV[4], ARGV[5]
  local enqueue, score, floor = ARGV[6] == '1', ARGV[7], tonumber(ARGV[8])
  if not alive(sid) then return {'gone'} end
  local q = key('q', name)
  local h = holder(name)
  if h and h[3] == rid then return {'granted', h[2], h[4]} end
  local back = 0
  if not h then back = held_back(name) end
  if not h and back == 0 then
    local top = first(name)
    if not top or top == rid then
      if top then redis.call('zrem', q, rid) else involve(sid, name, 1) end
      if score == '0' then score = next_score(q) end
      return {'granted', grant(name, sid, rid, score, floor), score}
    end
    hand_over(name)  -- freed by expiry, nobody handed it on: the first in line gets it now
    h = holder(name)
  end
  local mine = redis.call('zscore', q, rid)
  if not mine and enqueue then
    if score == '0' then score = next_score(q) end
    queue(sid, q, score, rid)
    involve(sid, name, 1)
    mine = score
  end
  h = h or {false, false, false, false, false, false}
  local ms = redis.call('pttl', key('l', name))
  return {'busy', mine or false, h[2], h[5], h[6], ms, redis.call('zcard', q), h[3], h[4], back}

elseif op == 'release' then  -- sid name token rid ('' for either: matched by the other)
  local sid, name = ARGV[3], ARGV[4]
  local l = key('l', name)
  local h = redis.call('hmget', l, 's', 't', 'r')
  if redis.call('zrem', key('q', name), ARGV[6]) == 1 then  -- a Redlock request's place
    involve(sid, name, -1)
  end
  if h[1] ~= sid or (h[2] ~= ARGV[5] and h[3] ~= ARGV[6]) then return 0 end
  redis.call('del', l, key('h', name))
  involve(sid, name, -1)
  note(name, {'was', h[2]})
  hand_over(name)
  return 1

elseif op == 'leave' then  -- sid name rid score: leave the queue, or ('' score) re-queue
  local sid, name, rid, score = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
  local q, l = key('q', name), key('l', name)
  local requeue = score ~= '' and alive(sid)
  local was = redis.call('zrem', q, rid) == 1
  local h = redis.call('hmget', l, 'r', 't')
  if h[1] == rid then  -- handed to us as we gave up: pass it on
    redis.call('del', l, key('h', name))
    note(name, {'was', h[2]})
    was = true
  end
  redis.call('del', key('w', rid))
  if requeue then
    queue(sid, q, score, rid)
    if not was then involve(sid, name, 1) end
  elseif was then
    involve(sid, name, -1)
  end
  if not holder(name) then hand_over(name) end
  return 1

elseif op == 'proclaim' then  -- sid name token value
  local sid, name = ARGV[3], ARGV[4]
  local l = key('l', name)
  local h = redis.call('hmget', l, 's', 't', 'o')
  if h[1] ~= sid or h[2] ~= ARGV[5] or not alive(sid) then return 0 end
  redis.call('hset', l, 'v', ARGV[6])
  note(name, {'t', h[2], 's', sid, 'o', h[3], 'v', ARGV[6]})
  return 1

elseif op == 'raise' then  -- name rid token: counter >= token; the grant of rid gets token
  local name, rid, t = ARGV[3], ARGV[4], tonumber(ARGV[5])
  local c = key('c', name)
  if (tonumber(redis.call('get', c)) or 0) < t then redis.call('set', c, t) end
  local l = key('l', name)
  local h = redis.call('hmget', l, 'r', 't', 's', 'o', 'v')
  if h[1] ~= rid then return 0 end
  if tonumber(h[2]) < t then
    redis.call('hset', l, 't', t)
    if redis.call('exists', key('h', name)) == 1 then
      redis.call('set', key('h', name), t, 'KEEPTTL')
    end
    local f = {'t', t, 's', h[3], 'o', h[4]}
    if h[5] then f[7] = 'v'; f[8] = h[5] end
    note(name, f)
  end
  return 1

elseif op == 'rget' then  -- key
  local h = redis.call('hmget', key('r', ARGV[3]), 'value', 'version')
  if not h[1] then return false end
  return {h[1], h[2]}

elseif op == 'rput' then  -- key value version wid: write if at version (0: absent)
  local k = key('r', ARGV[3])
  local h = redis.call('hmget', k, 'version', 'wid')
  if h[1] and h[2] == ARGV[6] then return tonumber(h[1]) end  -- ours, its answer was lost
  if (ARGV[5] == '0' and h[1]) or (ARGV[5] ~= '0' and h[1] ~= ARGV[5]) then return 0 end
  local v = (tonumber(h[1]) or 0) + 1
  redis.call('hset', k, 'value', ARGV[4], 'version', v, 'wid', ARGV[6])
  redis.call('zadd', P .. ':records', 0, ARGV[3])
  return v

elseif op == 'rlist' then  -- prefix: key, value, version of each record, in key order
  local out = {}
  for _, k in ipairs(redis.call('zrangebylex', P .. ':records', '[' .. ARGV[3],
                                '(' .. ARGV[3] .. '\255')) do
    local h = redis.call('hmget', key('r', k), 'value', 'version')
    if h[1] then out[#out + 1] = k; out[#out + 1] = h[1]; out[#out + 1] = h[2] end
  end
  return out

elseif op == 'held' then  -- name: its hold-back's token and ms left, if nobody holds it
  local name = ARGV[3]
  if holder(name) then return false end
  local back = held_back(name)
  if back == 0 then return false end
  return {redis.call('get', key('h', name)), back}

elseif op == 'info' then  -- name
  local name = ARGV[3]
  local h = holder(name)
  if not h then return false end
  local ms = redis.call('pttl', key('l', name))
  return {h[2], h[5], h[6], ms, redis.call('zcard', key('q', name)), h[1], h[3], h[4]}
end
return redis.error_reply('tenure: unknown operation ' .. tostring(op))
""".replace("__KEPT__", str(EVENTS_KEPT))


@dataclass(frozen=True)
class RedisURL:
    """A parsed ``redis://``, ``rediss://`` or ``redlock://`` URL, with its connection options
    (TLS and credentials, from the URL and the keywords of ``connect``)."""

    scheme: str
    hosts: list[tuple[str, int]]
    db: int
    prefix: str
    options: ConnectOptions = NO_OPTIONS

    @property
    def user(self) -> str:
        """The ACL user the server sees (``default`` when none is named)."""
        return self.options.username or "default"

    def display(self) -> str:
        """The URL with the password redacted: the user, ``***`` for a password (however it
        was given) and the TLS files (or ``tls=true``, unless the scheme says so)."""
        opts = self.options
        hosts = ",".join(f"{h}:{p}" for h, p in self.hosts)
        shown = [
            pair for pair in opts.shown() if pair != ("tls", "true") or self.scheme != "rediss"
        ]
        query = urlencode([("prefix", self.prefix), *shown], safe="/")
        return f"{self.scheme}://{opts.shown_user()}{hosts}/{self.db}?{query}"


def parse_url(
    url: str,
    schemes: Sequence[str],
    many: bool,
    usage: str,
    options: ConnectOptions = NO_OPTIONS,
) -> RedisURL:
    """Parse a Redis store URL and merge ``options`` over its own (`_connect.resolve`);
    ``InvalidArgument`` in one line (the URL redacted) if anything is wrong."""
    if Redis is None:
        raise InvalidArgument("the Redis stores need redis-py: pip install 'tenure[redis]'")

    def bad(why: str) -> InvalidArgument:
        return InvalidArgument(f"bad Redis store URL {redact(url)!r}: {why} (use {usage})")

    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise bad(str(exc)) from None
    scheme = parts.scheme.lower()
    if scheme not in schemes:
        raise bad(f"the scheme is not {' or '.join(schemes)}")
    if parts.fragment:
        raise bad("no fragment allowed")
    hosts = parse_hosts(parts.netloc, DEFAULT_PORT, bad)
    if len(hosts) > 1 and not many:
        raise bad("one host only (Redlock over several servers: redlock://h1,h2,h3)")
    db_text = parts.path.strip("/") or "0"
    if not db_text.isdigit():
        raise bad(f"the path must be a database number, not {db_text!r}")
    connect, rest = resolve(url, "redlock" if scheme == "redlock" else "redis", options)
    if scheme == "rediss":
        if connect.tls is False:
            raise bad("rediss:// is TLS: tls=false contradicts it (redis:// has no TLS)")
        connect = replace(connect, tls=True)
    return RedisURL(scheme, hosts, int(db_text), _prefix(rest, bad), connect)


def _prefix(query: list[tuple[str, str]], bad: Callable[[str], InvalidArgument]) -> str:
    """The ``prefix`` option, the one query option of these stores besides TLS's."""
    prefix = None
    for option, value in query:
        if option != "prefix":
            raise bad(f"unknown option {option!r} (known: prefix, {', '.join(TLS_OPTIONS)})")
        if prefix is not None:
            raise bad("prefix is given twice")
        if not _PREFIX.match(value):
            raise bad(f"bad prefix {value!r} (letters, digits, '_', '.', '-')")
        prefix = value
    return prefix or DEFAULT_PREFIX


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


def owner_json(owner: Owner) -> str:
    return json.dumps({"host": owner.host, "pid": owner.pid, "label": owner.label})


def parse_owner(text: object) -> Owner:
    try:
        fields = json.loads(str(text))
        return Owner(str(fields["host"]), int(fields["pid"]), str(fields.get("label", "")))
    except (ValueError, KeyError, TypeError):
        return Owner("?", 0, "not written by tenure")


def ms(seconds: float) -> str:
    return str(max(1, math.ceil(seconds * 1000)))


def delay_ms(lock_delay: float) -> str:
    """A lock-delay in ms for the script, rounded up (never shorter); "0": none."""
    return str(max(0, math.ceil(lock_delay * 1000)))


def change_of(name: str, fields: dict[str, str]) -> Change:
    """A ``Change`` from one event of a lock's stream."""
    if "t" not in fields:
        return Change(name, None)
    info = LockInfo(name, int(fields["t"]), parse_owner(fields.get("o")), 0.0, 0, fields.get("v"))
    return Change(name, info)


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
        self.user = url.user
        self.secrets = url.options.secrets()
        self.tls = url.options.use_tls
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
        if self.tls:  # the files are read now: a bad one fails before connecting
            common.update(connection_class=TLSConnection, tls_context=url.options.ssl_context())
        self.client = Redis.from_pool(ConnectionPool(socket_timeout=CALL_TIMEOUT, **common))
        self.blocking = Redis.from_pool(ConnectionPool(socket_timeout=None, **common))
        self.script = self.client.register_script(SCRIPT)
        # Why a server may hang up on a new connection, said when one does: TLS 1.3 refuses a
        # missing client certificate after the handshake, so the client sees only a reset.
        self.closed_hint = "does it speak TLS only? use rediss://"
        if self.tls and not url.options.cert:
            self.closed_hint = "does it demand a client certificate? give cert= and key="
        elif self.tls:
            self.closed_hint = "does it trust this client certificate?"

    def key(self, kind: str, ident: str) -> str:
        return f"{self.prefix}:{kind}:{ident}"

    def unavailable(self, exc: BaseException) -> StoreUnavailable:
        """One line that says what failed, with no secret in it."""
        detail = scrub(str(exc), self.secrets) or type(exc).__name__
        if isinstance(exc, redis_errors.AuthenticationError):
            if not self.secrets:
                detail = (
                    "no password given (user:password@ in the URL, password= or $TENURE_PASSWORD)"
                )
            return StoreUnavailable(
                f"Redis authentication failed for user {self.user!r} at {self.address}: {detail}"
            )
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
        return StoreUnavailable(f"Redis at {self.address}: {why}")

    async def call(self, op: str, *args: str, timeout: float = CALL_TIMEOUT) -> Any:
        try:
            with anyio.fail_after(timeout):
                return await self.script(keys=[], args=[op, self.prefix, *args])
        except (redis_errors.RedisError, OSError, TimeoutError) as exc:
            raise self.unavailable(exc) from None

    async def lock_names(self, kind: str = "l") -> list[str]:
        """The names that have a key of ``kind``: ``l`` the locks, ``h`` the hold-backs."""
        start = len(self.key(kind, ""))
        names = []
        try:
            with anyio.fail_after(CALL_TIMEOUT * 4):
                # SCAN ignores the ACL's key patterns: touch a key of the prefix first, so a
                # user who may not use this prefix is refused here, not shown its lock names.
                await self.client.exists(self.key("c", ""))
                async for key in self.client.scan_iter(match=self.key(kind, "*"), count=1000):
                    names.append(str(key)[start:])
        except (redis_errors.RedisError, OSError, TimeoutError) as exc:
            raise self.unavailable(exc) from None
        return sorted(set(names))

    async def info(self, name: str) -> LockInfo | None:
        row = await self.call("info", name)
        if not row:
            return None
        token, owner, value, left, waiters = row[:5]
        expires = max(0.0, int(left) / 1000)
        return LockInfo(name, int(token), parse_owner(owner), expires, int(waiters), value)

    async def held(self, name: str) -> HeldBack | None:
        """The hold-back of ``name`` on this server, if it is free and held back."""
        row = await self.call("held", name)
        if not row:
            return None
        return HeldBack(name, int(row[0] or 0), int(row[1]) / 1000)

    async def pop_wake(self, rid: str, timeout: float) -> str | None:
        """The token a hand-over pushed to this waiter, waiting up to ``timeout`` seconds (None:
        nothing came). Errors are not raised: the caller's next call reports them."""
        if timeout < 0.001:
            return None
        try:
            with anyio.move_on_after(timeout + 1.0):  # a stuck server must not hold us longer
                got = await self.blocking.blpop([self.key("w", rid)], timeout=timeout)
                return None if got is None else str(got[1])
        except (redis_errors.RedisError, OSError):
            await anyio.sleep(min(timeout, 0.1))
        return None

    async def last_event(self, name: str) -> str:
        """The id of the last event of ``name`` (``0-0``: none yet)."""
        try:
            with anyio.fail_after(CALL_TIMEOUT):
                last = await self.client.xrevrange(self.key("e", name), count=1)
        except (redis_errors.RedisError, OSError, TimeoutError) as exc:
            raise self.unavailable(exc) from None
        return str(last[0][0]) if last else "0-0"

    async def read_events(
        self, name: str, after: str, timeout: float
    ) -> list[tuple[str, dict[str, str]]]:
        """Events of ``name`` after the id ``after``, waiting up to ``timeout`` for one."""
        key = self.key("e", name)
        block = int(timeout * 1000)
        answer: Any
        try:
            if block <= 0:  # XREAD BLOCK 0 would wait for ever
                with anyio.fail_after(CALL_TIMEOUT):
                    answer = await self.client.xread({key: after}, count=EVENTS_KEPT)
            else:
                with anyio.fail_after(timeout + CALL_TIMEOUT):
                    answer = await self.blocking.xread({key: after}, count=EVENTS_KEPT, block=block)
        except (redis_errors.RedisError, OSError, TimeoutError) as exc:
            raise self.unavailable(exc) from None
        if not answer:
            return []
        return [(str(ident), dict(fields)) for ident, fields in answer[0][1]]

    async def aclose(self) -> None:
        for client in (self.client, self.blocking):
            with contextlib.suppress(redis_errors.RedisError, OSError):
                await client.aclose()
