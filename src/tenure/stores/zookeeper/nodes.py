"""The ZooKeeper store's nodes: where they are (`Paths`), what their data says (a lock node's
owner, a lock's proclaimed values, the hold-back marker `Mark`), and the queue's order."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from ..._values import Holder, LockInfo, Revocation
from .._kit import (
    FOREIGN,
    owner_fields,
    owner_json,
    owner_of,
    parse_owner,
    parse_revocation,
    revocation_json,
)

SEQUENCE = re.compile(r"-(\d{10})$")
MARK = "%held"
"""Suffix of a lock's hold-back marker beside its parent (``%he`` is never a percent-escape)."""
NOTICES = "%revoked"
"""The node under ``locks`` whose children tell sessions of their revoked grants (no encoded
name is ``%revoked``: an encoded ``%`` is ``%25``), named ``<session id hex>-<encoded name>``."""
LOG_LENGTH = 32
"""Proclaimed values kept in a lock's parent node, for watchers that read late."""


def encode(name: str) -> str:
    """``name`` as one path segment of ASCII: ``a/b``, ``..``, ``../x`` never walk the tree."""
    encoded = quote(name, safe="")
    return encoded.replace(".", "%2E") if encoded in (".", "..") else encoded


@dataclass(frozen=True)
class Paths:
    """The nodes under a chroot: ``locks`` (a queue per name, the hold-back markers beside
    them) and ``records``."""

    chroot: str

    @property
    def root(self) -> str:
        return f"{self.chroot}/locks"

    @property
    def records(self) -> str:
        return f"{self.chroot}/records"

    def parent(self, name: str) -> str:
        """The queue of ``name``."""
        return f"{self.root}/{encode(name)}"

    def marker(self, name: str) -> str:
        """The hold-back marker of ``name``: beside its parent, not in it (the queue and its
        watches never see it)."""
        return f"{self.root}/{encode(name)}{MARK}"

    def record(self, key: str) -> str:
        return f"{self.records}/{encode(key)}"

    @property
    def notices(self) -> str:
        """The parent of the revocation notices (see `NOTICES`)."""
        return f"{self.root}/{NOTICES}"

    def notice(self, session_id: int, name: str = "") -> str:
        """The notice of the revocation of ``name`` granted to session ``session_id`` (no
        ``name``: the prefix of that session's notices' names)."""
        return f"{self.notices}/{session_id:016x}-{encode(name)}"


def queue_of(children: list[str]) -> list[str]:
    """The lock's nodes in arrival order (foreign children ignored)."""
    numbered = []
    for child in children:
        match = SEQUENCE.search(child)
        if match:
            numbered.append((int(match.group(1)), child))
    return [child for _, child in sorted(numbered)]


def node_data(owner: Holder, ttl: float) -> bytes:
    """A lock node's data: who holds its session, and the session's timeout."""
    return owner_json(owner, ttl=ttl).encode()


def lock_info(name: str, data: bytes, stat: Any, count: int) -> LockInfo:
    """The holder of ``name`` from its node (``data``, ``stat``) in a queue of ``count``."""
    who, fields = parse_owner(data)
    try:
        value = fields.get("value")
        ttl = float(fields.get("ttl", 0.0))
    except (ValueError, TypeError):
        who, value, ttl = FOREIGN, None, 0.0
    value = value if isinstance(value, str) else None
    return LockInfo(name, int(stat.czxid), who, ttl, max(0, count - 1), value)


def read_log(data: bytes) -> list[tuple[int, LockInfo]]:
    """The values last proclaimed on a lock (its parent node's data): (number, term + value)."""
    entries = []
    try:
        for fields in json.loads(data)["log"] if data else []:
            who = owner_of(fields)
            value = fields["value"]
            value = value if isinstance(value, str) else None
            entries.append((int(fields["n"]), LockInfo("", int(fields["token"]), who, 0, 0, value)))
    except (ValueError, KeyError, TypeError, AttributeError):
        return []
    return entries


def log_data(
    log: list[tuple[int, LockInfo]], owner: Holder, ttl: float, token: int, value: str
) -> bytes:
    """A lock's parent data with ``value`` proclaimed in the term ``token`` (by ``owner``, on a
    session of ``ttl``) after the last ``LOG_LENGTH - 1`` values of ``log``."""
    number = log[-1][0] + 1 if log else 1
    kept = [
        {"n": n, **owner_fields(info.holder), "token": info.token, "value": info.value}
        for n, info in log[-(LOG_LENGTH - 1) :]
    ]
    entry = {"n": number, **owner_fields(owner), "ttl": ttl, "token": token, "value": value}
    return json.dumps({"log": [*kept, entry]}).encode()


def value_in(log: list[tuple[int, LockInfo]], token: int) -> str | None:
    """The value last proclaimed in the term ``token`` (None: none yet)."""
    return next((info.value for _, info in reversed(log) if info.token == token), None)


@dataclass(frozen=True)
class Mark:
    """A lock's hold-back marker: which grant it stands for, that grant's lock-delay, and
    whether a reader has seen the grant's node gone (the marker's mtime then says when).

    A marker put in the very multi that creates its grant's node (the uncontended path) cannot
    know that node's czxid: its data names the attempt instead, and its token is its own
    czxid (one multi, one zxid). Any later write of it names the token."""

    token: int
    lock_delay: float
    noticed: bool = False
    revoked: Revocation | None = None
    """Put by ``revoke``: the revocation, its delay the holder's TTL plus its lock-delay; the
    old holder's release then leaves the marker in place."""
    attempt: str = ""
    """The attempt (node name prefix) whose create put this marker, token 0: its czxid."""

    @classmethod
    def parse(cls, data: bytes | None, stat: Any = None) -> Mark:
        """The marker read as ``data`` at ``stat`` (its czxid: the token a marker put with its
        grant's node stands for)."""
        try:
            fields = json.loads(data or b"")
            attempt = fields.get("attempt")
            token = int(stat.czxid) if "token" not in fields and attempt else fields["token"]
            return cls(
                int(token), float(fields["lock_delay"]), bool(fields.get("noticed")),
                parse_revocation(fields.get("revoked")), str(attempt or ""),
            )  # fmt: skip
        except (ValueError, KeyError, TypeError, AttributeError):
            return cls(0, 0.0)  # not tenure's: holds nothing back

    def data(self) -> bytes:
        fields: dict[str, object] = {"lock_delay": self.lock_delay}
        if self.token:
            fields = {"token": self.token, **fields}
        else:
            fields["attempt"] = self.attempt
        if self.noticed:
            fields["noticed"] = True
        if self.revoked is not None:
            fields["revoked"] = revocation_json(self.revoked)
        return json.dumps(fields).encode()
