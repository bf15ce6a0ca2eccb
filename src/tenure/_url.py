"""Store URLs → store instances. The one place that knows which scheme is which store."""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from typing import Literal
from urllib.parse import urlsplit

from ._errors import InvalidArgument
from ._values import Capabilities
from .stores._connect import NO_OPTIONS, ConnectOptions
from .stores._registry import BY_SCHEME, by_scheme
from .stores._spi import Store

ENV_STORE = "TENURE_STORE"
Grade = Literal["correctness", "efficiency"]
GRADES: tuple[Grade, ...] = ("correctness", "efficiency")
Need = Literal["correctness", "efficiency", "elections", "records"]
Require = Need | Sequence[Need] | None
"""What ``require=`` may ask of a store: a grade and the capabilities it must offer."""


def resolve_url(url: str | None) -> str:
    """The URL to use: the argument, else $TENURE_STORE, else the embedded default."""
    if url is None or url == "":
        url = os.environ.get(ENV_STORE) or "sqlite://"
    if not isinstance(url, str):
        raise InvalidArgument(f"store URL must be a string, got {type(url).__name__}")
    return url


def store_class(url: str) -> type[Store]:
    """The store class a (resolved) URL names, without opening anything."""
    try:
        scheme = urlsplit(url).scheme.lower() if "://" in url else ""
    except ValueError:  # e.g. an unclosed "[": the URL itself is not repeated (a password?)
        raise InvalidArgument("the store URL cannot be parsed (an unclosed '['?)") from None
    # A built-in scheme needs no entry-point scan: a broken plugin cannot break it.
    known = BY_SCHEME if scheme in BY_SCHEME else by_scheme()
    if scheme not in known:
        shown = scheme or url.split(":", 1)[0]
        # The URL itself is not repeated: it may carry a password.
        raise InvalidArgument(f"unknown store URL scheme {shown!r} (known: {', '.join(known)})")
    entry = known[scheme]
    module = importlib.import_module(entry.module)
    store: type[Store] = getattr(module, entry.cls)
    return store


def check_requirements(store: type[Store], require: Require) -> None:
    """Refuse a store that lacks what the caller requires: ``"correctness"`` refuses an
    efficiency-grade store (Redis); ``"elections"`` or ``"records"`` one that does not offer
    them. One name or several."""
    if require is None:
        return
    wanted = (require,) if isinstance(require, str) else tuple(require)
    for need in wanted:
        if need not in GRADES and need not in Capabilities.OFFERS:
            known = ", ".join((*GRADES, *Capabilities.OFFERS))
            raise InvalidArgument(f"require must be one of {known}, got {need!r}")
    caps = store.capabilities
    if "correctness" in wanted and caps.grade != "correctness":
        raise InvalidArgument(
            f"the {store.scheme} store is {caps.grade}-grade (fine to avoid duplicate"
            " work, not for correctness: a fail-over can lose a lock and its token counter);"
            " require='correctness' refuses it"
        )
    for need in wanted:
        if need in Capabilities.OFFERS and not getattr(caps, need):
            raise InvalidArgument(f"the {store.scheme} store does not offer {need} (required)")


def open_store(
    url: str | None, require: Require = None, options: ConnectOptions = NO_OPTIONS
) -> Store:
    """The store a URL names; ``options`` (TLS, credentials) override what the URL says."""
    url = resolve_url(url)
    store = store_class(url)
    check_requirements(store, require)  # before anything is opened or created
    return store.from_url(url, options)
