"""`tenure serve --allow-revoke`: the page's revoke route, on a real `tenure serve` process. A
lock held by the test's client is revoked through the route with the token shown; its holder
loses it at its next renewal (`Loss.REVOKED`) and the name is held back, recorded as revoked
by the server. A wrong token, a missing CSRF token, a store that cannot revoke, and a server
without the flag are refused, and nothing is revoked."""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest
from served import Served, serving

import tenure
from tenure.cli.web.revoke import CSRF_HEADER

pytestmark = pytest.mark.timeout(90)
TTL = 1.5  # short: the holder renews every TTL/3 and learns of the revocation then


def csrf(served: Served) -> str:
    """The server's token, as the page carries it."""
    found = re.search(r'<meta name="tenure-csrf" content="([^"]+)">', served.http.get("/").text)
    assert found, "no token in the page"
    return found.group(1)


def post(served: Served, body: dict[str, Any], token: str | None) -> Any:
    headers = {} if token is None else {CSRF_HEADER: token}
    return served.http.post("/api/revoke", json=body, headers=headers)


def test_revoke_a_held_lock_with_its_token(sqlite_store_url: str) -> None:
    with (
        serving(sqlite_store_url, "--allow-revoke") as served,
        tenure.connect(sqlite_store_url, label="stuck", lock_delay=2) as client,
    ):
        lease = client.lock("deploy", ttl=TTL).acquire()
        lost = threading.Event()
        lease.on_lost(lambda _lease: lost.set())
        shown = served.until(lambda s: s["locks"] and s, what="the lock shown")
        assert shown["store"]["revoke"] is True
        key = csrf(served)

        stale = post(served, {"name": "deploy", "token": lease.token + 1}, key)
        assert stale.status_code == 409, stale.text
        assert stale.json() == {"error": f"'deploy' is not held with token {lease.token + 1}:"
                                " nothing revoked"}  # fmt: skip
        assert [info.token for info in client.locks("deploy")] == [lease.token]
        assert not lease.lost

        done = post(served, {"name": "deploy", "token": lease.token, "reason": "hung"}, key)
        assert done.status_code == 200, done.text
        assert done.json()["token"] == lease.token and done.json()["free_in"] > 0
        assert lost.wait(TTL * 3), "the holder was not told at its next renewal"
        assert lease.loss is tenure.Loss.REVOKED
        assert lease.lost_reason is not None and "tenure serve" in lease.lost_reason

        [held] = client.lock_delays("deploy")
        assert held.revoked is not None and held.revoked.token == lease.token
        assert not held.revoked.now  # never freed at once from the web
        assert held.revoked.by.label == "tenure serve"
        assert held.revoked.by.pid == served.proc.pid
        assert re.fullmatch(r"from tenure serve, client 127\.0\.0\.1:\d+: hung",
                            held.revoked.reason)  # fmt: skip
        back = served.until(lambda s: s["held_back"] and s["held_back"][0], what="held back")
        assert back["revoked"]["text"].startswith("revoked by ")
        assert back["revoked"]["text"] == held.revoked.describe()


def test_cross_site_and_bad_requests_are_refused_then_a_permit(sqlite_store_url: str) -> None:
    with (
        serving(sqlite_store_url, "--allow-revoke") as served,
        tenure.connect(sqlite_store_url) as client,
    ):
        lease = client.lock("deploy", ttl=20).acquire()
        body = {"name": "deploy", "token": lease.token}
        key = csrf(served)
        assert post(served, body, None).status_code == 403  # what a page elsewhere could send
        assert post(served, body, key + "x").status_code == 403
        form = served.http.post("/api/revoke", data=body, headers={CSRF_HEADER: key})
        assert form.status_code == 415
        elsewhere = served.http.post(
            "/api/revoke", json=body, headers={CSRF_HEADER: key, "Host": "evil.example"}
        )
        assert elsewhere.status_code == 400  # a rebound DNS name
        no_token = post(served, {"name": "deploy"}, key)
        assert no_token.status_code == 400 and '"token"' in no_token.json()["error"]
        assert served.http.get("/api/revoke").status_code == 405
        assert [info.token for info in client.locks("deploy")] == [lease.token]
        assert client.lock_delays() == []

        # A semaphore's permit: the state names its store lock, which the route revokes.
        permit = client.semaphore("pool", 2, ttl=20).acquire()
        [holder] = served.until(lambda s: s["semaphores"], what="the permit")[0]["holders"]
        assert holder["token"] == permit.token
        done = post(served, {"name": holder["lock"], "token": permit.token}, key)
        assert done.status_code == 200, done.text
        assert [held.name for held in client.lock_delays()] == [holder["lock"]]
        assert [info.token for info in client.locks("deploy")] == [lease.token]


def test_off_by_default(sqlite_store_url: str) -> None:
    with serving(sqlite_store_url) as served, tenure.connect(sqlite_store_url) as client:
        lease = client.lock("deploy", ttl=20).acquire()
        page = served.http.get("/").text
        assert "tenure-csrf" not in page and "<button" not in page
        refused = post(served, {"name": "deploy", "token": lease.token}, "anything")
        assert refused.status_code == 403 and "--allow-revoke" in refused.json()["error"]
        assert [info.token for info in client.locks("deploy")] == [lease.token]


def test_a_store_that_cannot_revoke(redlock_store_url: str) -> None:
    with serving(redlock_store_url, "--allow-revoke") as served:
        assert served.state()["store"]["revoke"] is False  # the page shows no button
        refused = post(served, {"name": "deploy", "token": 1}, csrf(served))
        assert refused.status_code == 409
        assert "cannot revoke a grant safely" in refused.json()["error"]
