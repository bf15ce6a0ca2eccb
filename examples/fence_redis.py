"""Fence data kept in Redis: a former holder's late write is refused, and writes nothing.

Two holders take the lock ``orders`` one after the other; each grant's token is higher. The
second holder admits its token and writes; then the first one, whose lease is over (as after a
long pause), writes with its old token: ``RedisFence`` refuses it in the same Lua script that
would have written, so the key keeps the second holder's value. Run it against a Redis server
you can write to: ``python examples/fence_redis.py redis://127.0.0.1:6379/0``. It deletes and
then writes the keys ``tenure:fence:{orders}``, ``{orders}:state`` and ``{orders}:log``: its lock
store is a new one, whose tokens start again at 1.
"""

from __future__ import annotations

import sys
import tempfile

import redis

import tenure
from tenure.fence import RedisFence

url = sys.argv[1] if len(sys.argv) > 1 else "redis://127.0.0.1:6379/0"
db = redis.Redis.from_url(url, decode_responses=True)
fence = RedisFence(db)  # the highest token of "orders" lives in tenure:fence:{orders}
db.delete(fence.key("orders"), "{orders}:state", "{orders}:log")

with tempfile.TemporaryDirectory() as tmp, tenure.connect(f"sqlite:///{tmp}/locks.db") as client:
    with client.lock("orders", ttl=30) as first:
        fence.set("orders", first.token, "{orders}:state", "packed")
        print(f"holder 1 (token {first.token}) wrote: packed")

    with client.lock("orders", ttl=30) as second:  # a newer grant, a higher token
        fence.admit("orders", second.token)  # before reading: older holders are shut out
        print(f"holder 2 (token {second.token}) read: {db.get('{orders}:state')}")
        fence.set("orders", second.token, "{orders}:state", "shipped")
        fence.xadd("orders", second.token, "{orders}:log", {"state": "shipped"})
        print(f"holder 2 (token {second.token}) wrote: shipped")

    try:  # holder 1 wakes up and writes with the token it still has
        fence.set("orders", first.token, "{orders}:state", "packed again")
    except tenure.StaleToken as exc:
        print(f"holder 1's late write refused: {exc}")

print(f"state: {db.get('{orders}:state')}, log entries: {db.xlen('{orders}:log')}")
