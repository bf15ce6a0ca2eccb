"""The options of a client, named once: what ``connect`` and ``connect_async`` take as keywords
(`ConnectKeywords`) and check before anything is opened (`ClientOptions`)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, TypedDict

from ._clock import REAL_CLOCK, Clock
from ._names import check_label
from ._state import DEFAULT_DRIFT, DEFAULT_MARGIN, DEFAULT_TTL, Timing
from ._url import Require, open_store
from .stores._connect import NO_OPTIONS, ConnectOptions
from .stores._spi import Store

if sys.version_info >= (3, 11):
    from typing import Unpack
else:  # pragma: no cover - Python 3.10
    from typing_extensions import Unpack

__all__ = ["DEFAULT_TTL", "ClientOptions", "ConnectKeywords", "Unpack"]


class ConnectKeywords(TypedDict, total=False):
    """The keywords of ``tenure.connect`` and ``tenure.connect_async``."""

    drift: float
    """Largest clock-rate error assumed between this host and the store (default 0.01)."""
    margin: float
    """Seconds of safety before the store could expire a lease (default 0.05)."""
    label: str
    """Shown beside host and pid as the holder of this client's locks."""
    clock: Clock
    """The monotonic clock leases are timed on (tests inject one)."""
    require: Require
    """``"correctness"``, ``"elections"``, ``"records"`` (or several): refuse a store without."""
    lock_delay: float | None
    """Seconds a name is granted to nobody after a lease ends without a release (default:
    one TTL, at most 15 s; docs/stop-by.md)."""
    tls: bool | None
    ca: str | None
    cert: str | None
    key: str | None
    username: str | None
    password: str | None
    """TLS and credentials: override the URL's (docs/production.md)."""


class ClientKeywords(TypedDict):
    """The keywords a client (`AsyncClient`, `Client`) is made with besides its store."""

    drift: float
    margin: float
    label: str
    clock: Clock
    lock_delay: float | None


@dataclass(frozen=True)
class ClientOptions:
    """Checked when made, so a bad option is refused before a store is opened (or created)."""

    drift: float = DEFAULT_DRIFT
    margin: float = DEFAULT_MARGIN
    label: str = ""
    clock: Clock = REAL_CLOCK
    require: Require = None
    lock_delay: float | None = None
    connect: ConnectOptions = NO_OPTIONS

    def __post_init__(self) -> None:
        Timing(DEFAULT_TTL, self.drift, self.margin, self.lock_delay)
        check_label(self.label)

    @classmethod
    def of(cls, **keywords: Unpack[ConnectKeywords]) -> ClientOptions:
        given: dict[str, Any] = dict(keywords)
        connect = ConnectOptions(**{name: given.pop(name) for name in _TLS if name in given})
        return cls(**given, connect=connect)

    def client_keywords(self) -> ClientKeywords:
        """What a client is made with besides its store."""
        return ClientKeywords(
            drift=self.drift,
            margin=self.margin,
            label=self.label,
            clock=self.clock,
            lock_delay=self.lock_delay,
        )

    def open_store(self, url: str | None) -> Store:
        """The store ``url`` names (default: $TENURE_STORE, else the embedded SQLite file)."""
        return open_store(url, self.require, self.connect)


_TLS = ("tls", "ca", "cert", "key", "username", "password")
