"""The contract for store authors, public and versioned (`STORE_API_VERSION`).

A store, built in or in a package of its own, codes against these names only: the contract
(``Store``, ``Elections``, ``Records`` and the values they answer with), the kit every store
shares (URL parsing, error translation, the owner codec, patience and back-off) and the
`StoreEntry` that registers it (a package outside tenure does so by entry point, group
``tenure.stores``). How to write one: docs/stores/authors.md. The implementation lives in
``_spi`` and ``_kit``; these are re-exports, and a change that breaks a store raises the
version.
"""

from .._errors import InvalidArgument, LeaseLost, StoreUnavailable
from ._connect import NO_OPTIONS, ConnectOptions
from ._kit import (
    FOREIGN,
    Backoff,
    InDoubt,
    StoreURL,
    Unavailable,
    owner_json,
    parse_owner,
    parse_url,
    patience,
    retrying,
)
from ._registry import ENTRY_POINTS, STORE_API_VERSION, StoreEntry, by_key, by_scheme, entries
from ._spi import (
    Busy,
    Capabilities,
    Change,
    Elections,
    Grant,
    Holder,
    LockDelay,
    LockInfo,
    Record,
    Records,
    Revocation,
    Revocations,
    Session,
    Store,
    Watch,
    elections_of,
    offers,
    records_of,
    revocations_of,
)

__all__ = [
    "ENTRY_POINTS",
    "FOREIGN",
    "NO_OPTIONS",
    "STORE_API_VERSION",
    "Backoff",
    "Busy",
    "Capabilities",
    "Change",
    "ConnectOptions",
    "Elections",
    "Grant",
    "Holder",
    "InDoubt",
    "InvalidArgument",
    "LeaseLost",
    "LockDelay",
    "LockInfo",
    "Record",
    "Records",
    "Revocation",
    "Revocations",
    "Session",
    "Store",
    "StoreEntry",
    "StoreURL",
    "StoreUnavailable",
    "Unavailable",
    "Watch",
    "by_key",
    "by_scheme",
    "elections_of",
    "entries",
    "offers",
    "owner_json",
    "parse_owner",
    "parse_url",
    "patience",
    "records_of",
    "retrying",
    "revocations_of",
]
