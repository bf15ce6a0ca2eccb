"""A real Prometheus server (Debian's ``/usr/bin/prometheus``) on a free loopback port, scraping
one target every second, for the metrics tests (tests/plugin_prometheus.py).

The target's port is chosen before the server starts (``target``: what the test serves its
metrics on); the server keeps its data and log in a temporary directory removed by ``close()``.
``targets()`` and ``query()`` are its HTTP API (``/api/v1/targets``, ``/api/v1/query``).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tenure.stores._server import HOST, ServerGroup, ServerProcess, free_port

PROMETHEUS = Path(os.environ.get("TENURE_PROMETHEUS", "/usr/bin/prometheus"))
PREFIX = "tenure-prometheus-"
JOB = "tenure"
CONFIG = """\
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: {job}
    static_configs:
      - targets: ["{target}"]
"""


class PrometheusServer(ServerGroup):
    """``PrometheusServer().start()`` (or ``with``): Prometheus on 127.0.0.1:``port`` scraping
    ``127.0.0.1:target`` every second as job ``tenure``."""

    def __init__(self) -> None:
        if not os.access(PROMETHEUS, os.X_OK):
            raise RuntimeError(f"prometheus not found at {PROMETHEUS}")
        self.root = Path(tempfile.mkdtemp(prefix=PREFIX))
        self.port = free_port()
        self.target = free_port()
        """The port the scraped target is to serve its metrics on."""
        self.process = ServerProcess()

    @property
    def processes(self) -> list[ServerProcess]:
        return [self.process]

    @property
    def url(self) -> str:
        """The server's HTTP address."""
        return f"http://{HOST}:{self.port}"

    def start(self, timeout: float = 60.0) -> PrometheusServer:
        """Start the server and return once it answers ``/-/ready``."""
        config = self.root / "prometheus.yml"
        config.write_text(CONFIG.format(job=JOB, target=f"{HOST}:{self.target}"))
        self.process.spawn(
            [
                str(PROMETHEUS),
                f"--config.file={config}",
                f"--storage.tsdb.path={self.root / 'data'}",
                f"--web.listen-address={HOST}:{self.port}",
            ],
            self.root / "prometheus.log",
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as answer:
                    if answer.status == 200:
                        return self
            except OSError:
                pass
            if not self.process.running:
                log = (self.root / "prometheus.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"prometheus exited at start:\n{log}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"prometheus not ready on {self.url} after {timeout:g} s")
            time.sleep(0.1)

    def _get(self, path: str, **params: str) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=5) as answer:
            body = json.load(answer)
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus {path}: {body}")
        return body["data"]

    def targets(self) -> list[dict[str, Any]]:
        """The active targets, as ``/api/v1/targets`` lists them (``health``: up, down…)."""
        data: dict[str, Any] = self._get("/api/v1/targets", state="active")
        targets: list[dict[str, Any]] = data["activeTargets"]
        return targets

    def up(self) -> bool:
        """True once the target was scraped successfully (its health is up)."""
        return any(t["health"] == "up" for t in self.targets())

    def query(self, promql: str) -> list[tuple[dict[str, str], float]]:
        """An instant PromQL query: each series' labels and value."""
        data = self._get("/api/v1/query", query=promql)
        return [(r["metric"], float(r["value"][1])) for r in data["result"]]

    def wait_for(self, promql: str, timeout: float = 30.0) -> list[tuple[dict[str, str], float]]:
        """The first non-empty answer to ``promql`` (scrapes come every second)."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.query(promql)
            if found:
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(f"no answer to {promql!r} after {timeout:g} s")
            time.sleep(0.25)
