"""Store URLs → store instances. The one place that knows which scheme is which store."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from ._errors import InvalidArgument
from .stores._spi import Store

ENV_STORE = "TENURE_STORE"
SCHEMES = ("sqlite",)
PLANNED = ("etcd", "postgresql", "postgres", "zookeeper", "redis", "rediss", "redlock")


def resolve_url(url: str | None) -> str:
    """The URL to use: the argument, else $TENURE_STORE, else the embedded default."""
    if url is None or url == "":
        url = os.environ.get(ENV_STORE) or "sqlite://"
    if not isinstance(url, str):
        raise InvalidArgument(f"store URL must be a string, got {type(url).__name__}")
    return url


def open_store(url: str | None) -> Store:
    url = resolve_url(url)
    scheme = urlsplit(url).scheme.lower() if "://" in url else ""
    if scheme == "sqlite":
        from .stores.sqlite import SQLiteStore

        return SQLiteStore.from_url(url)
    if scheme in PLANNED:
        raise InvalidArgument(f"store {scheme!r} is not available in this version of tenure yet")
    shown = scheme or url.split(":", 1)[0]
    raise InvalidArgument(
        f"unknown store URL scheme {shown!r} in {url!r} (known: {', '.join(SCHEMES)})"
    )
