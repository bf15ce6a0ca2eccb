"""An in-memory tenure store for one process (``memory://NAME``), registered by entry point.

Only the registry entry lives here, so that reading the registry imports nothing else; the
store is in `tenure_memory_store.store`, imported when a ``memory://`` URL is opened."""

from tenure.stores import StoreEntry

ENTRY = StoreEntry(
    "memory",
    ("memory",),
    "tenure_memory_store.store",
    "MemoryStore",
    "in memory (one process)",
    "memory://NAME",
    None,
    namespace="path",
    api=1,  # the store API this package was written for: another tenure refuses it
)
