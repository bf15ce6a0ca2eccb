"""Store URLs → store instances. The one place that knows which scheme is which store."""

from __future__ import annotations

import importlib
import os
from urllib.parse import urlsplit

from ._errors import InvalidArgument
from .stores._spi import Store

ENV_STORE = "TENURE_STORE"
# scheme → (module under tenure.stores, class): imported on use, so a store's client library is
# needed only by those who use that store.
STORES = {
    "sqlite": ("sqlite", "SQLiteStore"),
    "etcd": ("etcd", "EtcdStore"),
    "postgresql": ("postgres", "PostgresStore"),
    "postgres": ("postgres", "PostgresStore"),
}
PLANNED = ("zookeeper", "redis", "rediss", "redlock")


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
    if scheme in STORES:
        module, name = STORES[scheme]
        store: type[Store] = getattr(importlib.import_module(f"tenure.stores.{module}"), name)
        return store.from_url(url)
    if scheme in PLANNED:
        raise InvalidArgument(f"store {scheme!r} is not available in this version of tenure yet")
    shown = scheme or url.split(":", 1)[0]
    # The URL itself is not repeated: it may carry a password.
    raise InvalidArgument(f"unknown store URL scheme {shown!r} (known: {', '.join(STORES)})")
