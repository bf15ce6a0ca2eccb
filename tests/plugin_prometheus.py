"""The Prometheus fixture: a real ``prometheus`` server per test on a free loopback port, in a
temporary directory, scraping one target every second (``prometheus.target``: the port the test
serves its metrics on, known before the server starts). Loaded by ``tests/conftest.py``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tenure_tools.prometheus import PROMETHEUS, PrometheusServer


@pytest.fixture
def prometheus() -> Iterator[PrometheusServer]:
    """Started and ready; stopped and its directory removed after the test."""
    try:
        server = PrometheusServer()
    except RuntimeError as exc:
        pytest.skip(f"Prometheus not available ({PROMETHEUS}): {exc}")
    with server.start():
        yield server
