"""Shared fixtures. Real servers only: each is started once per session on a free loopback port."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tenure.stores.postgres.server import PG_BIN, PostgresServer
from tenure_tools.certs import TLSFiles, make_tls_files

# Each networked store's fixtures live in their own plugin module (tests/plugin_<store>.py),
# found by name: a new store's plugin needs no line here.
pytest_plugins = sorted(path.stem for path in Path(__file__).parent.glob("plugin_*.py"))

# A suite started in the background (`cmd &` in a script) inherits SIGINT ignored, and so would
# every command it starts: the tests that press Ctrl-C on a command need it deliverable.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Two halves of about equal length for README's test command (``-n 2 --dist loadgroup``):
    the chaos suite on one worker, everything else on the other, each half one test at a time
    as before. The chaos runs spend most of their time waiting (a fifth of the two cores between
    them), and each worker starts its own servers, so a chaos run's faults (a paused or killed
    server, a cut link) never reach the other half's tests."""
    for item in items:
        half = "chaos" if item.nodeid.startswith("tests/chaos/") else "rest"
        item.add_marker(pytest.mark.xdist_group(half))


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the whole session; connect with ``postgres.dsn``.

    Tests share it: give tables (or databases) unique names. A test that kills or restarts the
    server should start its own ``PostgresServer`` instead.
    """
    missing = PostgresServer.missing()
    if missing:
        pytest.skip(f"PostgreSQL binaries not found in {PG_BIN}: {', '.join(missing)}")
    server = PostgresServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def sqlite_store_url(tmp_path: Path) -> str:
    """A fresh embedded store for one test."""
    return f"sqlite:///{tmp_path}/store.db"


@pytest.fixture
def memory_store_url() -> str:
    """A fresh namespace of the in-memory store (tests/plugins/tenure-memory-store, a package
    outside tenure known by its entry point) for one test."""
    return f"memory://t_{uuid.uuid4().hex}"


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TLSFiles:
    """A CA, a loopback server certificate, a client certificate and a wrong CA, made once."""
    return make_tls_files(tmp_path_factory.mktemp("tls"))
