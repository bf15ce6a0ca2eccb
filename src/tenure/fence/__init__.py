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

Every fence admits an equal token (one lease writes many times), admits and remembers a higher
one, and refuses a lower one with ``tenure.StaleToken``.
"""

from .files import FileFence
from .redis import AsyncRedisFence, RedisFence
from .sql import DBAPICursor, SQLFence

__all__ = ["AsyncRedisFence", "DBAPICursor", "FileFence", "RedisFence", "SQLFence"]
