"""`serving(store)`: a real `tenure serve` process (uvicorn) on a free loopback port, ready when
it has printed its URL; stopped (and waited for) at the end."""

from __future__ import annotations

import json
import re
import selectors
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

TENURE = str(Path(sys.executable).with_name("tenure"))

READY_TIMEOUT = 30.0  # a guard against a hang (start-up is slow on a loaded machine), not a measure


class Served:
    """A running `tenure serve`: its URL, and an HTTP client on it."""

    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc = proc
        self.url = url
        self.http = httpx.Client(base_url=url, timeout=10)

    def state(self) -> dict[str, Any]:
        response = self.http.get("/api/state")
        assert response.status_code == 200, response.text
        found: dict[str, Any] = response.json()
        return found

    def until(
        self, condition: Callable[[dict[str, Any]], Any], what: str, timeout: float = 15.0
    ) -> Any:
        """Read /api/state until ``condition(state)`` is truthy (a change made by another
        thread or process lands in the store by itself); fail after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition(self.state())
            if value:
                return value
            if time.monotonic() > deadline:
                pytest.fail(f"timed out waiting for {what}")
            time.sleep(0.02)


def _first_line(proc: subprocess.Popen[str]) -> str:
    """The first line on stdout, or a failure with stderr if none comes in time."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(READY_TIMEOUT):
            proc.kill()
            pytest.fail(f"tenure serve printed no URL: {proc.communicate()[1]}")
    return proc.stdout.readline()


@contextmanager
def serving(store: str, *args: str) -> Iterator[Served]:
    """`tenure serve --port 0 --store STORE ARGS`, ready once it printed its URL."""
    proc = subprocess.Popen(
        [TENURE, "serve", "--port", "0", "--interval", "0.1", "--store", store, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = _first_line(proc)
        found = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert found, (line, proc.communicate()[1] if proc.poll() is not None else "")
        served = Served(proc, found.group(0))
        yield served
        served.http.close()
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=30)
        assert "Traceback" not in err, err


def events(served: Served, timeout: float = 20.0) -> Iterator[dict[str, Any]]:
    """The states /api/events pushes, as they come (each data line one JSON object); a failure
    if the stream is still open after ``timeout`` seconds (checked at each line: the server
    sends a comment at least every 15 s)."""
    deadline = time.monotonic() + timeout
    with served.http.stream("GET", "/api/events", timeout=30) as stream:
        for line in stream.iter_lines():
            if time.monotonic() > deadline:
                pytest.fail("the event stream did not show it in time")
            if line.startswith("data: "):
                yield json.loads(line[len("data: ") :])
