"""The resource side of fencing: refuse a token lower than one already accepted.

A lease's token only protects anything if the resource checks it, atomically with the write it
guards. Each module here is a fence for one kind of resource (docs/fencing.md lists them all):

- ``SQLFence`` (``tenure.fence.sql``): a table in the protected SQL database (sqlite3, psycopg);
  the token is admitted in the same transaction as the write.
- ``RedisFence`` and ``AsyncRedisFence`` (``tenure.fence.redis``): data kept in Redis; each
  fenced ``SET``, ``HSET`` or ``XADD`` is one Lua script that checks the token and writes.
  They take a redis-py client (``pip install 'tenure[redis]'``); importing them does not.
- ``FileFence`` (``tenure.fence.files``): whole files in a shared directory (Linux, macOS),
  replaced atomically under an OS lock held by every cooperating writer.
- ``ASGIFence`` and ``WSGIFence`` (``tenure.fence.http``): middleware in front of an HTTP
  service; the token comes in a request header and is admitted in a keeper
  (``tenure.fence.keepers``: ``MemoryKeeper``, ``SQLKeeper``, ``AsyncSQLKeeper``; the Redis
  fences are keepers too) before the app sees the request. A stale token is answered 409,
  and the clients ``HTTPXAuth`` (httpx) and ``RequestsAuth`` (requests) raise ``StaleToken``
  for it (docs/fencing-http.md).

Every fence admits an equal token (one lease writes many times), admits and remembers a higher
one, and refuses a lower one with ``tenure.StaleToken``.
"""

from typing import TYPE_CHECKING, Any

from ._clients import HasToken
from .files import FileFence
from .http import Admission, ASGIFence, FenceRequest, WSGIFence, admission, stale_body
from .keepers import AsyncKeeper, AsyncSQLKeeper, Keeper, MemoryKeeper, SQLKeeper
from .redis import AsyncRedisFence, RedisFence
from .sql import DBAPICursor, SQLFence

if TYPE_CHECKING:
    from .httpx_auth import HTTPXAuth
    from .requests_auth import RequestsAuth

__all__ = [
    "ASGIFence",
    "Admission",
    "AsyncKeeper",
    "AsyncRedisFence",
    "AsyncSQLKeeper",
    "DBAPICursor",
    "FenceRequest",
    "FileFence",
    "HTTPXAuth",
    "HasToken",
    "Keeper",
    "MemoryKeeper",
    "RedisFence",
    "RequestsAuth",
    "SQLFence",
    "SQLKeeper",
    "WSGIFence",
    "admission",
    "stale_body",
]


def __getattr__(name: str) -> Any:
    # The HTTP clients are imported when asked for: httpx is needed only by whoever uses it.
    if name in ("HTTPXAuth", "RequestsAuth"):
        from . import http

        return getattr(http, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
