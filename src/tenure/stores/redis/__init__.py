"""The Redis stores, both **efficiency-grade**: ``RedisStore`` on one server (``redis://``,
``rediss://``) and ``RedlockStore`` on a quorum of independent servers (``redlock://``). One
Lua script (``lua/tenure.lua``) is the whole protocol of a server; both stores share its
transport (``instance``), the URL (``url``), the session type (``session``) and the watches
(``watch``). Design notes: docs/stores/redis.md."""

from .redlock import RedlockStore
from .single import RedisStore

__all__ = ["RedisStore", "RedlockStore"]
