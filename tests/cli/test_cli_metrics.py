"""--metrics and --metrics-textfile: a real Prometheus scrapes `tenure elect`, and `tenure run`
leaves node_exporter's textfile behind (docs/metrics.md)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tenure_tools.prometheus import PrometheusServer

if TYPE_CHECKING:
    from conftest import Cli

pytestmark = pytest.mark.timeout(90)


def test_prometheus_scrapes_elect(cli: Cli, prometheus: PrometheusServer) -> None:
    # TTL 3 s: a renewal every second, so the scrapes see renewals while the command sleeps.
    elect = cli.start(
        "elect", "--store", cli.store, "--ttl", "3", "--metrics", f"127.0.0.1:{prometheus.target}",
        "web", "--", "sleep", "600",
    )  # fmt: skip
    cli.until(prometheus.up, what="Prometheus to scrape tenure elect")
    # The queries docs/metrics.md shows, as Prometheus answers them.
    [(labels, leading)] = prometheus.wait_for('tenure_leading{job="tenure"}')
    assert (labels["store"], leading) == ("sqlite", 1.0)
    [(_, terms)] = prometheus.wait_for('tenure_terms_total{job="tenure"}')
    assert terms == 1.0
    renewed = 'tenure_renewal_seconds_count{job="tenure",outcome="ok"} > 0'
    assert prometheus.wait_for(renewed)
    slack = 'tenure_renewal_slack_seconds_count{job="tenure"} > 0'
    assert prometheus.wait_for(slack)
    # A confirmed renewal leaves about 1.87 s (TTL 3 less drift, margin and TTL/3) before the
    # stop-by: none below 1 s (unless one came 0.87 s late), none above 5 s.
    healthy = (
        'sum(tenure_renewal_slack_seconds_bucket{job="tenure",le="5.0"})'
        ' - sum(tenure_renewal_slack_seconds_bucket{job="tenure",le="1.0"})'
    )
    [(_, between)] = prometheus.query(healthy)
    [(_, count)] = prometheus.query('sum(tenure_renewal_slack_seconds_count{job="tenure"})')
    assert between == count > 0
    elect.send_signal(signal.SIGTERM)
    _, stderr = elect.communicate(timeout=20)
    assert "Traceback" not in stderr


def test_run_writes_textfile(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "textfile" / "job.prom"
    path.parent.mkdir()
    done = cli("run", "--store", cli.store, "--metrics-textfile", str(path), "job", "--", "true")
    assert done.returncode == 0, done.stderr
    families = {f.name: f for f in text_string_to_metric_families(path.read_text())}
    acquired = {
        tuple(sorted(s.labels.items())): s.value
        for s in families["tenure_acquire_seconds"].samples
        if s.name == "tenure_acquire_seconds_count"
    }
    assert acquired == {(("kind", "lock"), ("outcome", "granted"), ("store", "sqlite")): 1.0}
    assert families["tenure_textfile_written_timestamp_seconds"].samples[0].value > 0
    assert [p.name for p in path.parent.iterdir()] == ["job.prom"]  # no temporary file left


def test_textfile_in_a_missing_directory(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "missing" / "job.prom"
    done = cli("run", "--store", cli.store, "--metrics-textfile", str(path), "job", "--", "true")
    assert done.returncode == 2
    assert "not a writable directory" in cli.one_error_line(done.stderr)
    assert cli.locks() == []


def test_metrics_bad_address(cli: Cli) -> None:
    done = cli("elect", "--store", cli.store, "--metrics", "host:http", "web", "--", "true")
    assert done.returncode == 2
    assert "is not PORT or HOST:PORT" in cli.one_error_line(done.stderr)
    assert cli.locks() == []
