"""`tenure serve`'s JSON API, on a real `tenure serve` process (uvicorn) on a free loopback port:
grants taken from the test through the public API show in /api/state and /api/events; /healthz
follows the store; the binding rules refuse what they should."""

from __future__ import annotations

import signal
import socket
import threading
from typing import TYPE_CHECKING, Any

import pytest
from served import events, serving

import tenure
from tenure.cli.web.state import public_url
from tenure.testing.proxy import ChaosProxy

if TYPE_CHECKING:
    from conftest import Cli
    from tenure.stores.redis.server import RedisServer

pytestmark = pytest.mark.timeout(90)


def named(rows: list[dict[str, Any]], name: str, key: str = "name") -> dict[str, Any] | None:
    found = [row for row in rows if row[key] == name]
    return found[0] if found else None


def test_state_shows_every_primitive_then_nothing(sqlite_store_url: str) -> None:
    with (
        serving(sqlite_store_url) as served,
        tenure.connect(sqlite_store_url, label="web-1") as client,
        tenure.connect(sqlite_store_url, label="web-2") as other,
    ):
        empty = served.state()
        assert empty["store"] == {"url": sqlite_store_url, "grade": "correctness", "revoke": True}
        for part in ("locks", "held_back", "semaphores", "rwlocks", "leaders", "partitions"):
            assert empty[part] == [], part
        assert empty["history"] == []

        done = client.once("nightly", "2026-01-01", ttl=20).acquire()
        done.complete(0)
        failed = client.once("nightly", "2026-01-02", ttl=20).acquire()
        failed.complete(3)
        lease = client.lock("orders-db", ttl=20).acquire()
        got, finish = threading.Event(), threading.Event()

        def wait_for_it() -> None:  # a waiter behind the test's lease
            with other.lock("orders-db", ttl=20, timeout=60):
                got.set()
                finish.wait(60)

        waiter = threading.Thread(target=wait_for_it)
        waiter.start()
        try:
            with (
                client.semaphore("pool", 3, ttl=20) as permit,
                other.semaphore("pool", 3, ttl=20),
                client.rwlock("config", ttl=20).read,
                other.rwlock("config", ttl=20).read,
                client.election("scheduler", ttl=20, value="node-a") as leading,
                client.partitions("shards", ["a", "b"], ttl=20, member="m1"),
            ):
                now = served.until(
                    lambda s: (
                        named(s["locks"], "orders-db")["waiters"] == 1  # type: ignore[index]
                        and len(s["partitions"]) == 1
                        and len(s["partitions"][0]["items"]) == 2
                        and s
                    ),
                    what="the waiter and the member's two items",
                )
                [lock] = now["locks"]
                assert lock["token"] == lease.token and lock["label"] == "web-1"
                assert lock["pid"] > 0 and lock["host"] == socket.gethostname()
                assert 0 < lock["expires_in"] <= 20

                [sem] = now["semaphores"]
                assert (sem["name"], sem["permits"], sem["held"]) == ("pool", 3, 2)
                assert {h["label"] for h in sem["holders"]} == {"web-1", "web-2"}
                assert permit.token in {h["token"] for h in sem["holders"]}

                [rw] = now["rwlocks"]
                assert rw["name"] == "config" and len(rw["readers"]) == 2 and rw["gate"] is None

                [lead] = now["leaders"]
                assert lead == {**lead, "name": "scheduler", "term": leading.term}
                assert lead["value"] == "node-a" and lead["label"] == "web-1"

                [group] = now["partitions"]
                assert group["group"] == "shards"
                assert [m["id"] for m in group["members"]] == ["m1"]
                assert {(i["item"], i["member"]) for i in group["items"]} == {
                    ("a", "m1"),
                    ("b", "m1"),
                }

                [job] = now["history"]
                assert job["job"] == "nightly"
                slots = {s["slot"]: s for s in job["slots"]}
                assert slots["2026-01-01"]["state"] == "done"
                assert slots["2026-01-02"]["state"] == "failed"
                assert slots["2026-01-02"]["exit_code"] == 3
                assert slots["2026-01-01"]["duration"] >= 0

                lease.release()
                served.until(
                    lambda s: named(s["locks"], "orders-db")["label"] == "web-2",  # type: ignore[index]
                    what="the waiter to hold the lock",
                )
        finally:
            finish.set()
            if not lease.released:  # (failed early: the waiter still waits for it)
                lease.release()
            waiter.join(60)
        after = served.state()
        for part in ("locks", "held_back", "semaphores", "rwlocks", "leaders", "partitions"):
            assert after[part] == [], part
        assert len(after["history"][0]["slots"]) == 2


def test_a_name_held_back_by_lock_delay(cli: Cli) -> None:
    """A holder killed without a release: the name shows as held back, with its token."""
    with serving(cli.store) as served:
        holder = cli.start(
            "run", "--store", cli.store, "--ttl", "1", "--lock-delay", "30", "job", "--",
            "sleep", "60",
        )  # fmt: skip
        served.until(lambda s: named(s["locks"], "job"), what="the lock held")
        holder.kill()  # SIGKILL: no release
        held = served.until(lambda s: named(s["held_back"], "job"), what="the name held back")
        assert held["token"] == 1 and 25 < held["free_in"] <= 30
        assert served.state()["locks"] == []


def test_events_push_each_change(sqlite_store_url: str) -> None:
    with serving(sqlite_store_url) as served, tenure.connect(sqlite_store_url) as client:
        stream = events(served)
        assert next(stream)["locks"] == []
        lease = client.lock("deploy", ttl=20).acquire()
        shown = next(s for s in stream if s["locks"])
        assert [(lock["name"], lock["token"]) for lock in shown["locks"]] == [
            ("deploy", lease.token)
        ]
        lease.release()
        assert next(s for s in stream if not s["locks"])["locks"] == []


def test_healthz_follows_the_store(redis_server: RedisServer) -> None:
    """200 while the store answers; 503 and one line once it is cut off, 200 again once it is
    back (a Redis store behind a proxy that resets every connection: shown efficiency-grade)."""
    host, port = redis_server.endpoint.rsplit(":", 1)
    with ChaosProxy(host, int(port)).start_in_thread() as proxy:
        url = f"redis://{proxy.address}/0?prefix=serve_health"
        with serving(url) as served:
            ok = served.http.get("/healthz")
            assert (ok.status_code, ok.text) == (200, "ok\n")
            assert served.state()["store"]["grade"] == "efficiency"
            proxy.set_mode("reset")
            down = served.http.get("/healthz")
            assert down.status_code == 503
            assert down.text.startswith("store unavailable: ") and down.text.count("\n") == 1
            assert served.http.get("/api/state").status_code == 503
            proxy.heal()
            assert served.http.get("/healthz").status_code == 200


def test_metrics_and_the_page(sqlite_store_url: str) -> None:
    """/metrics is prometheus_client's default registry; the page and its files come with
    headers that keep everything on this origin."""
    with serving(sqlite_store_url) as served:
        metrics = served.http.get("/metrics")
        assert metrics.status_code == 200 and "python_info" in metrics.text
        page = served.http.get("/")
        assert page.status_code == 200 and '<script src="/page.js"' in page.text
        assert "default-src 'none'" in page.headers["content-security-policy"]
        for path, kind in (("/page.js", "text/javascript"), ("/page.css", "text/css")):
            got = served.http.get(path)
            assert got.status_code == 200 and got.headers["content-type"].startswith(kind)
            assert "http://" not in got.text and "https://" not in got.text  # nothing from outside
        # Another name for 127.0.0.1 (a rebound DNS name): refused.
        assert served.http.get("/api/state", headers={"Host": "evil.example"}).status_code == 400
        assert served.http.post("/api/state").status_code == 405  # read-only


def test_a_public_address_needs_public(cli: Cli) -> None:
    refused = cli("serve", "--host", "0.0.0.0", "--port", "0", "--store", cli.store)
    assert refused.returncode == 2
    line = cli.one_error_line(refused.stderr)
    assert "not a loopback address: add --public" in line


def test_a_port_in_use_is_one_line(cli: Cli) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = str(taken.getsockname()[1])
        refused = cli("serve", "--port", port, "--store", cli.store)
    assert refused.returncode == 2
    assert f"cannot listen on 127.0.0.1 port {port}" in cli.one_error_line(refused.stderr)


def test_bad_interval(cli: Cli) -> None:
    refused = cli("serve", "--interval", "0", "--store", cli.store)
    assert refused.returncode == 2 and "--interval" in cli.one_error_line(refused.stderr)


def test_the_shown_url_has_no_credentials_nor_files() -> None:
    shown = public_url("etcd://bob:***@h1:2379,h2:2379/ns?ca=/etc/ca.pem&key=/etc/k.pem")
    assert shown == "etcd://h1:2379,h2:2379/ns"
    assert public_url("redis://:***@[::1]:6379/0?tls=1") == "redis://[::1]:6379/0"


def test_ctrl_c_stops_it_with_a_stream_open(sqlite_store_url: str) -> None:
    """The server waits for open responses as it stops: the event streams end first, so Ctrl-C
    stops it at once, exit 130, no traceback (`serving` checks stderr)."""
    with serving(sqlite_store_url) as served:
        stream = events(served)
        next(stream)
        served.proc.send_signal(signal.SIGINT)
        assert list(stream) == []  # the stream ends: the server closed it
        assert served.proc.wait(30) == 130
