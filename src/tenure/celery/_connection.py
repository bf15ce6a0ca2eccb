"""One tenure client per process for a Celery app, opened on first use.

Celery's prefork pool forks its children after the app is imported, and a client's loop thread
does not survive a fork: so the client is keyed by process id and made where it is used."""

from __future__ import annotations

import os
import threading
from typing import Any, Literal

import tenure

Need = Literal["correctness", "elections", "records"]
_clients: dict[tuple[int, str | None, tuple[Need, ...]], tenure.Client] = {}
_lock = threading.Lock()


def store_url(app: Any) -> str | None:
    """``app.conf.tenure_store``, else ``$TENURE_STORE``, else the embedded store."""
    url = app.conf.get("tenure_store")
    return str(url) if url else None


def client_for(app: Any, *require: Need) -> tenure.Client:
    """This process's client of the app's store, which must offer ``require``."""
    key = (os.getpid(), store_url(app), require)
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = tenure.connect(key[1], require=require or None)
        return client
