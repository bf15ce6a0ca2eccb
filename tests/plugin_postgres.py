"""Fixtures for the PostgreSQL store: a fresh schema per test on the session's shared server."""

from __future__ import annotations

from uuid import uuid4

import pytest

from tenure.stores.postgres.server import PostgresServer


@pytest.fixture
def postgres_store_url(postgres: PostgresServer) -> str:
    """A URL to an empty namespace (its own schema) on the shared server."""
    return f"{postgres.dsn}?schema=t_{uuid4().hex[:12]}"
