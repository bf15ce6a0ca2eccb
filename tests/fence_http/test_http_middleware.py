"""ASGIFence and WSGIFence on real servers (uvicorn + Starlette, waitress + Flask), spoken to
with raw httpx requests so that every status, header and body is seen as sent."""

from __future__ import annotations

import json

import httpx
import pytest
import redis.asyncio
from http_servers import starlette_app, uvicorn_serving
from prometheus_client import CollectorRegistry

from conftest import MODE_KEEPERS, Keeping, keeper_for, serving
from tenure import InvalidArgument
from tenure.fence import (
    Admission,
    ASGIFence,
    AsyncRedisFence,
    FenceRequest,
    MemoryKeeper,
    WSGIFence,
)
from tenure.fence.http import UNSAFE_METHODS
from tenure.metrics import Metrics


def post(url: str, token: str | bytes | None, resource: str | None = "orders") -> httpx.Response:
    headers: dict[str, str | bytes] = {}
    if token is not None:
        headers["Tenure-Token"] = token
    if resource is not None:
        headers["Tenure-Resource"] = resource
    return httpx.post(url, headers=headers, timeout=10)


@pytest.mark.parametrize(("mode", "keeping"), MODE_KEEPERS, indirect=["keeping"])
def test_equal_and_higher_tokens_are_admitted_a_lower_one_is_refused_409(
    mode: str, keeping: Keeping
) -> None:
    with serving(mode, keeper_for(mode, keeping)) as service:
        orders = service.url + "/orders"
        assert post(orders, "5").status_code == 200
        assert post(orders, "5").status_code == 200  # one lease writes many times
        assert keeping.highest("orders") == 5
        assert post(orders, "7").status_code == 200
        assert keeping.highest("orders") == 7

        refused = post(orders, "6")
        assert refused.status_code == 409
        assert refused.headers["content-type"] == "application/json"
        assert refused.json() == {
            "error": "stale fencing token",
            "resource": "orders",
            "token": 6,
            "highest": 7,
        }
        assert keeping.highest("orders") == 7
        assert post(orders, "6", resource="other").status_code == 200  # resources are apart
        assert keeping.highest("other") == 6
        # The refused request never reached the app; the admitted ones came with their token.
        assert service.seen == [
            Admission("orders", 5),
            Admission("orders", 5),
            Admission("orders", 7),
            Admission("other", 6),
        ]


BAD_TOKENS = [
    pytest.param(None, id="missing"),
    pytest.param("", id="empty"),
    pytest.param("abc", id="garbage"),
    pytest.param("-1", id="negative"),
    pytest.param(str(2**63), id="too-large"),
    pytest.param("9" * 500, id="huge"),
    pytest.param("1.5", id="decimal"),
    pytest.param("0x10", id="hex"),
    pytest.param("+5", id="plus"),
    pytest.param("1_000", id="underscore"),
    pytest.param("5, 6", id="two"),
    pytest.param("٣".encode(), id="arabic-digit"),
    pytest.param(b"\xff\xfe", id="not-utf8"),
]


@pytest.mark.parametrize("mode", ["wsgi", "asgi"])
@pytest.mark.parametrize("token", BAD_TOKENS)
def test_a_missing_or_malformed_token_is_400_with_one_line(
    mode: str, token: str | bytes | None
) -> None:
    keeper = MemoryKeeper()
    with serving(mode, keeper) as service:
        answer = post(service.url + "/orders", token)
        assert answer.status_code == 400
        assert answer.headers["content-type"].startswith("text/plain")
        assert answer.text.endswith("\n") and answer.text.count("\n") == 1, answer.text
        assert "token" in answer.text.lower()
        assert len(answer.text) < 200
        assert service.seen == [] and keeper.highest("orders") is None
        assert post(service.url + "/orders", "1").status_code == 200  # the service goes on


@pytest.mark.parametrize("mode", ["wsgi", "asgi"])
def test_the_token_range_ends_are_admitted(mode: str) -> None:
    with serving(mode, MemoryKeeper()) as service:
        assert post(service.url + "/orders", "0").status_code == 200
        assert post(service.url + "/orders", str(2**63 - 1)).status_code == 200
        assert post(service.url + "/orders", str(2**63 - 2)).status_code == 409


@pytest.mark.parametrize("mode", ["wsgi", "asgi"])
@pytest.mark.parametrize(
    ("resource", "why"),
    [(None, "missing Tenure-Resource header"), ("", "fence resource must be a non-empty")],
)
def test_a_missing_or_empty_resource_is_400(mode: str, resource: str | None, why: str) -> None:
    with serving(mode, MemoryKeeper()) as service:
        answer = post(service.url + "/orders", "1", resource=resource)
        assert answer.status_code == 400 and why in answer.text, answer.text
        assert answer.text.count("\n") == 1
        assert service.seen == []


@pytest.mark.parametrize("mode", ["wsgi", "asgi"])
def test_reads_pass_without_a_token_but_a_token_they_carry_is_admitted(mode: str) -> None:
    keeper = MemoryKeeper()
    with serving(mode, keeper) as service:
        orders = service.url + "/orders"
        assert httpx.get(orders).status_code == 200  # no token: passes
        assert service.seen == [None]
        read = httpx.get(orders, headers={"Tenure-Token": "8", "Tenure-Resource": "orders"})
        assert read.status_code == 200 and keeper.highest("orders") == 8
        # The newer holder's read shut out the older holder's late write.
        assert post(orders, "7").status_code == 409
        stale_read = httpx.get(orders, headers={"Tenure-Token": "7", "Tenure-Resource": "orders"})
        assert stale_read.status_code == 409
        bad_read = httpx.get(orders, headers={"Tenure-Token": "x", "Tenure-Resource": "orders"})
        assert bad_read.status_code == 400
        for method in sorted(UNSAFE_METHODS):
            unfenced = httpx.request(method, orders, headers={"Tenure-Resource": "orders"})
            assert unfenced.status_code == 400, method
        assert service.seen == [None, Admission("orders", 8)]


@pytest.mark.parametrize("mode", ["wsgi", "asgi"])
def test_every_method_can_be_made_to_carry_a_token(mode: str) -> None:
    with serving(mode, MemoryKeeper(), methods="*") as service:
        assert httpx.get(service.url + "/orders").status_code == 400
    with serving(mode, MemoryKeeper(), methods=["get"]) as service:
        assert httpx.get(service.url + "/orders").status_code == 400
        assert httpx.post(service.url + "/orders").status_code == 200


@pytest.mark.parametrize("mode", ["wsgi", "asgi"])
def test_a_fixed_resource_ignores_the_header(mode: str) -> None:
    keeper = MemoryKeeper()
    with serving(mode, keeper, resource="ledger") as service:
        assert post(service.url + "/orders", "3", resource=None).status_code == 200
        assert post(service.url + "/orders", "2", resource="elsewhere").json()["resource"] == (
            "ledger"
        )
        assert keeper.highest("ledger") == 3 and keeper.highest("elsewhere") is None


@pytest.mark.parametrize("mode", ["wsgi", "asgi"])
def test_a_resource_derived_from_the_path(mode: str) -> None:
    keeper = MemoryKeeper()
    with serving(mode, keeper, resource=lambda request: request.path.strip("/")) as service:
        assert post(service.url + "/orders/a", "5", resource=None).status_code == 200
        assert post(service.url + "/orders/b", "4", resource=None).status_code == 200
        refused = post(service.url + "/orders/a", "4", resource=None)
        assert refused.status_code == 409 and refused.json()["resource"] == "orders/a"
        assert post(service.url + "/orders/caf%C3%A9", "1").status_code == 200
        assert keeper.highest("orders/café") == 1  # the path as decoded, alike on both servers
        assert service.seen == [
            Admission("orders/a", 5),
            Admission("orders/b", 4),
            Admission("orders/café", 1),
        ]


@pytest.mark.parametrize("mode", ["wsgi", "asgi"])
def test_other_headers_can_be_named(mode: str) -> None:
    with serving(mode, MemoryKeeper(), token_header="X-Fence", resource_header="X-On") as service:
        ok = httpx.post(service.url + "/orders", headers={"X-Fence": "2", "X-On": "r"})
        assert ok.status_code == 200
        missing = post(service.url + "/orders", "3")
        assert missing.status_code == 400 and "X-Fence" in missing.text


@pytest.mark.parametrize("mode", ["wsgi", "asgi"])
def test_without_a_keeper_the_headers_are_checked_and_handed_to_the_app(mode: str) -> None:
    with serving(mode, None) as service:
        assert post(service.url + "/orders", "5").status_code == 200
        assert post(service.url + "/orders", "4").status_code == 200  # the app's to refuse
        assert post(service.url + "/orders", "x").status_code == 400
        assert service.seen == [Admission("orders", 5), Admission("orders", 4)]


def test_bad_arguments_are_refused_at_once() -> None:
    def app(environ: object, start_response: object) -> list[bytes]:
        return []

    async def asgi(scope: object, receive: object, send: object) -> None:
        pass

    with pytest.raises(InvalidArgument, match="blocking keeper"):
        WSGIFence(app, AsyncRedisFence(redis.asyncio.Redis()))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="methods"):
        ASGIFence(asgi, MemoryKeeper(), methods="POST")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="resource"):
        ASGIFence(asgi, MemoryKeeper(), resource="")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="resource"):
        WSGIFence(app, MemoryKeeper(), resource=5)  # type: ignore[arg-type]


def test_the_409_body_is_what_the_clients_parse() -> None:
    from tenure import StaleToken
    from tenure.fence import stale_body
    from tenure.fence._clients import stale

    body = json.dumps(stale_body(StaleToken("r", 1, 2))).encode()
    found = stale(409, body)
    assert found is not None and (found.resource, found.token, found.highest) == ("r", 1, 2)
    assert stale(409, b'{"error": "out of stock"}') is None
    assert stale(409, b"not json") is None
    assert stale(200, body) is None


@pytest.mark.parametrize("mode", ["wsgi", "asgi"])
def test_a_resource_callable_may_refuse_a_request_with_400(mode: str) -> None:
    def resource(request: FenceRequest) -> str:
        tenant = request.headers.get("x-tenant")
        if tenant is None:
            raise InvalidArgument("missing X-Tenant header")
        return f"tenant/{tenant}"

    with serving(mode, MemoryKeeper(), resource=resource) as service:
        refused = post(service.url + "/orders", "1", resource=None)
        assert (refused.status_code, refused.text) == (400, "missing X-Tenant header\n")
        ok = httpx.post(service.url + "/orders", headers={"Tenure-Token": "1", "X-Tenant": "t"})
        assert ok.status_code == 200 and service.seen == [Admission("tenant/t", 1)]


def test_starlette_add_middleware_builds_the_fence() -> None:
    seen: list[Admission | None] = []
    app = starlette_app(seen)
    app.add_middleware(ASGIFence, keeper=MemoryKeeper(), resource="ledger")
    with uvicorn_serving(app) as url:
        assert post(url + "/orders", "4", resource=None).status_code == 200
        assert post(url + "/orders", "3", resource=None).status_code == 409
    assert seen == [Admission("ledger", 4)]


@pytest.mark.parametrize(("mode", "keeping"), MODE_KEEPERS, indirect=["keeping"])
def test_a_refusal_is_counted_by_tenure_metrics_with_its_keeper(
    mode: str, keeping: Keeping
) -> None:
    registry = CollectorRegistry()
    keeper = keeper_for(mode, keeping)
    # SQLKeeper refuses through its SQLFence, AsyncRedisFence as RedisFence.
    names = {"SQLKeeper": "SQLFence", "AsyncSQLKeeper": "SQLFence", "AsyncRedisFence": "RedisFence"}
    name = names.get(type(keeper).__name__, type(keeper).__name__)
    with Metrics(registry), serving(mode, keeper) as service:
        assert post(service.url + "/orders", "2").status_code == 200
        assert post(service.url + "/orders", "1").status_code == 409
        counted = registry.get_sample_value("tenure_fence_refusals_total", {"fence": name})
    assert counted == 1
