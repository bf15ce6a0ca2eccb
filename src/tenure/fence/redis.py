"""A fence in Redis itself, for data kept in Redis (``tenure.fence.RedisFence``).

Each fenced write is one Lua script (run by ``EVALSHA``): it compares the holder's token with
the highest kept for the resource, raises that if the token is not lower, and does the write —
atomically, since Redis runs a script to its end before any other command. A lower token
writes nothing and raises ``tenure.StaleToken``::

    fence = RedisFence(redis.Redis())
    # The holder got `lease` from a tenure lock and sends lease.token along with its writes:
    fence.set("orders", lease.token, "{orders}:42", "shipped")   # StaleToken if a newer one came
    fence.hset("orders", lease.token, "{orders}:totals", {"shipped": 1})
    fence.xadd("orders", lease.token, "{orders}:log", {"event": "shipped", "id": "42"})
    fence.admit("orders", lease.token)   # before a read: no older holder writes after it

The highest token of resource ``R`` is the string key ``<prefix>{R}`` (prefix
``tenure:fence:``). In a Redis Cluster a script may touch only keys of one hash slot: name the
data keys with the same hash tag, ``{R}...``, and both hash to the slot of ``R``.

``RedisFence`` takes a ``redis.Redis`` client, ``AsyncRedisFence`` a ``redis.asyncio.Redis``
one (redis-py, ``pip install 'tenure[redis]'``); this module itself imports without redis-py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from .._errors import InvalidArgument
from ._tokens import check, refused

if TYPE_CHECKING:
    import redis
    import redis.asyncio
    from redis.commands.core import AsyncScript, Script

__all__ = ["AsyncRedisFence", "RedisFence"]

Value: TypeAlias = bytes | str | int | float
"""What a fenced write stores: redis-py encodes it (``str`` as UTF-8, numbers as decimals)."""

Fields: TypeAlias = Mapping[str, Value] | Mapping[bytes, Value]
"""A hash's fields or a stream entry's: names and values, at least one."""

DEFAULT_PREFIX = "tenure:fence:"

# KEYS[1] is the resource's highest token, ARGV[1] the caller's. Tokens are compared as decimal
# strings (a shorter one is lower, then byte order): Lua numbers are doubles and lose integers
# above 2**53, and tokens go up to 2**63-1. The token key is written only when it changes.
_ADMIT = """
local seen = redis.call('GET', KEYS[1])
local token = ARGV[1]
if seen and (#token < #seen or (#token == #seen and token < seen)) then
  return {0, seen}
end
if seen ~= token then redis.call('SET', KEYS[1], token) end
"""
_SCRIPTS = {
    "admit": _ADMIT + "return {1, 1}",
    "set": _ADMIT + "redis.call('SET', KEYS[2], ARGV[2])\nreturn {1, 1}",
    "hset": _ADMIT + "return {1, redis.call('HSET', KEYS[2], unpack(ARGV, 2))}",
    "xadd": _ADMIT + "return {1, redis.call('XADD', KEYS[2], unpack(ARGV, 2))}",
}


@dataclass(frozen=True)
class _Call:
    """One fenced script call, prepared without I/O: the same for the sync and async fences."""

    script: str
    resource: str
    token: int
    keys: list[str | bytes]
    args: list[Value]


class _Fence:
    """What both fences share: the key names, the checks of arguments, the script's answer."""

    def __init__(self, prefix: str) -> None:
        if not isinstance(prefix, str) or "{" in prefix or "}" in prefix:
            raise InvalidArgument(
                f"fence key prefix must be a string without braces (the hash tag is the "
                f"resource's), not {prefix!r}"
            )
        self.prefix = prefix

    def __repr__(self) -> str:
        return f"{type(self).__name__}(prefix={self.prefix!r})"

    def key(self, resource: str) -> str:
        """The key that keeps ``resource``'s highest token: ``<prefix>{resource}``."""
        return f"{self.prefix}{{{resource}}}"

    def _call(
        self,
        script: str,
        resource: str,
        token: int,
        key: str | bytes | None = None,
        args: list[Value] | None = None,
    ) -> _Call:
        check(resource, token)
        keys: list[str | bytes] = [self.key(resource)]
        if key is not None:
            if not isinstance(key, (str, bytes)) or not key:
                raise InvalidArgument(f"data key must be a non-empty str or bytes, not {key!r}")
            keys.append(key)
        return _Call(script, resource, token, keys, [token, *(args or [])])

    def _admit(self, resource: str, token: int) -> _Call:
        return self._call("admit", resource, token)

    def _set(self, resource: str, token: int, key: str | bytes, value: Value) -> _Call:
        return self._call("set", resource, token, key, [value])

    def _hset(self, resource: str, token: int, key: str | bytes, mapping: Fields) -> _Call:
        return self._call("hset", resource, token, key, _pairs(mapping, "hset"))

    def _xadd(self, resource: str, token: int, key: str | bytes, fields: Fields, id: str) -> _Call:
        if not isinstance(id, str) or not id:
            raise InvalidArgument(f"stream entry id must be a non-empty string, not {id!r}")
        return self._call("xadd", resource, token, key, [id, *_pairs(fields, "xadd")])

    def _answer(self, call: _Call, reply: list[object]) -> object:
        """The write's reply, or `StaleToken` with the highest token the script found."""
        admitted, value = reply
        if admitted == 1:
            return value
        raise refused("RedisFence", call.resource, call.token, int(_text(value)))


class RedisFence(_Fence):
    """Fenced writes to Redis through a ``redis.Redis`` client (each one Lua script).

    Equal tokens are admitted (one lease writes many times), a higher one is admitted and kept,
    a lower one raises ``tenure.StaleToken`` and writes nothing.
    """

    def __init__(self, client: redis.Redis, *, prefix: str = DEFAULT_PREFIX) -> None:
        super().__init__(prefix)
        self.client = client
        self._scripts: dict[str, Script] = {
            name: client.register_script(source) for name, source in _SCRIPTS.items()
        }

    def _run(self, call: _Call) -> object:
        reply = self._scripts[call.script](keys=call.keys, args=call.args)
        return self._answer(call, reply)

    def admit(self, resource: str, token: int) -> None:
        """Admit ``token`` for ``resource`` (and keep it if higher) or raise `StaleToken`; call
        it before a read, so that no older holder writes after the read."""
        self._run(self._admit(resource, token))

    def set(self, resource: str, token: int, key: str | bytes, value: Value) -> None:
        """``SET key value``, fenced: done only if ``token`` is admitted."""
        self._run(self._set(resource, token, key, value))

    def hset(self, resource: str, token: int, key: str | bytes, mapping: Fields) -> int:
        """``HSET key field value ...``, fenced; the number of fields added (as HSET says)."""
        return int(_text(self._run(self._hset(resource, token, key, mapping))))

    def xadd(
        self,
        resource: str,
        token: int,
        key: str | bytes,
        fields: Fields,
        *,
        id: str = "*",
    ) -> str:
        """``XADD key id field value ...``, fenced; the new entry's id."""
        return _text(self._run(self._xadd(resource, token, key, fields, id)))

    def highest(self, resource: str) -> int | None:
        """The highest token admitted for ``resource``; None before the first."""
        check(resource, 0)
        seen = self.client.get(self.key(resource))
        return None if seen is None else int(_text(seen))


class AsyncRedisFence(_Fence):
    """`RedisFence` through a ``redis.asyncio.Redis`` client: the same methods, awaited."""

    def __init__(self, client: redis.asyncio.Redis, *, prefix: str = DEFAULT_PREFIX) -> None:
        super().__init__(prefix)
        self.client = client
        self._scripts: dict[str, AsyncScript] = {
            name: client.register_script(source) for name, source in _SCRIPTS.items()
        }

    async def _run(self, call: _Call) -> object:
        reply = await self._scripts[call.script](keys=call.keys, args=call.args)
        return self._answer(call, reply)

    async def admit(self, resource: str, token: int) -> None:
        """`RedisFence.admit`, awaited."""
        await self._run(self._admit(resource, token))

    async def set(self, resource: str, token: int, key: str | bytes, value: Value) -> None:
        """`RedisFence.set`, awaited."""
        await self._run(self._set(resource, token, key, value))

    async def hset(self, resource: str, token: int, key: str | bytes, mapping: Fields) -> int:
        """`RedisFence.hset`, awaited."""
        return int(_text(await self._run(self._hset(resource, token, key, mapping))))

    async def xadd(
        self,
        resource: str,
        token: int,
        key: str | bytes,
        fields: Fields,
        *,
        id: str = "*",
    ) -> str:
        """`RedisFence.xadd`, awaited."""
        return _text(await self._run(self._xadd(resource, token, key, fields, id)))

    async def highest(self, resource: str) -> int | None:
        """`RedisFence.highest`, awaited."""
        check(resource, 0)
        seen = await self.client.get(self.key(resource))
        return None if seen is None else int(_text(seen))


def _pairs(mapping: object, command: str) -> list[Value]:
    if not isinstance(mapping, Mapping) or not mapping:
        raise InvalidArgument(f"{command} needs a non-empty mapping of fields, not {mapping!r}")
    return [item for pair in mapping.items() for item in pair]


def _text(value: object) -> str:
    """A reply as text, whether the client decodes responses or not."""
    return value.decode() if isinstance(value, bytes) else str(value)
