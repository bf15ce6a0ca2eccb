"""The URLs of the Redis stores: ``redis://``, ``rediss://`` (TLS) and ``redlock://`` (a list of
servers), with the connection options of ``connect`` merged over the URL's."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from urllib.parse import urlencode

from .._connect import NO_OPTIONS, ConnectOptions
from .._kit import StoreURL
from .._kit import parse_url as split_url

DEFAULT_PORT = 6379
DEFAULT_PREFIX = "tenure"
_PREFIX = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")


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
    schemes: tuple[str, ...],
    many: bool,
    usage: str,
    options: ConnectOptions = NO_OPTIONS,
) -> RedisURL:
    """Parse a Redis store URL and merge ``options`` over its own (`_connect.resolve`);
    ``InvalidArgument`` in one line (the URL redacted) if anything is wrong."""
    checked = split_url(url, schemes, "Redis", usage)
    hosts = checked.hosts(DEFAULT_PORT)
    if len(hosts) > 1 and not many:
        raise checked.bad("one host only (Redlock over several servers: redlock://h1,h2,h3)")
    db_text = checked.parts.path.strip("/") or "0"
    if not db_text.isdigit():
        raise checked.bad(f"the path must be a database number, not {db_text!r}")
    scheme = checked.scheme
    connect = checked.resolve(options, name="redlock" if scheme == "redlock" else "redis")
    if scheme == "rediss":
        if connect.tls is False:
            raise checked.bad("rediss:// is TLS: tls=false contradicts it (redis:// has no TLS)")
        connect = replace(connect, tls=True)
    return RedisURL(scheme, hosts, int(db_text), _prefix(checked), connect)


def _prefix(checked: StoreURL) -> str:
    """The ``prefix`` option, the one query option of these stores besides TLS's. The pairs
    are checked in order, so the first mistake in the URL is the one reported."""
    prefix = DEFAULT_PREFIX
    for end, (_, value) in enumerate(checked.query, 1):
        replace(checked, query=checked.query[:end]).only("prefix")  # unknown, or twice
        if not _PREFIX.match(value):
            raise checked.bad(f"bad prefix {value!r} (letters, digits, '_', '.', '-')")
        prefix = value
    return prefix
