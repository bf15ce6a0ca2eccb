"""HTTPXAuth (httpx.Client and httpx.AsyncClient) and RequestsAuth against fenced apps on real
servers: the headers they send, and the fence's 409 turned into StaleToken."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import pytest
import requests

from conftest import serving
from tenure import InvalidArgument, StaleToken
from tenure.fence import Admission, HTTPXAuth, MemoryKeeper, RequestsAuth


@dataclass
class Holder:
    """Lease-like: the auth reads ``token`` at each request."""

    token: int


Post = Callable[[str, "Holder | int", "str | None"], int]
"""Sends one POST with a client's auth; returns the status (or raises what the client raises)."""


def httpx_sync(url: str, lease: Holder | int, resource: str | None) -> int:
    with httpx.Client(auth=HTTPXAuth(lease, resource), timeout=10) as http:
        return http.post(url).status_code


def httpx_async(url: str, lease: Holder | int, resource: str | None) -> int:
    async def send() -> int:
        async with httpx.AsyncClient(auth=HTTPXAuth(lease, resource), timeout=10) as http:
            return (await http.post(url)).status_code

    return asyncio.run(send())


def requests_session(url: str, lease: Holder | int, resource: str | None) -> int:
    with requests.Session() as session:
        session.auth = RequestsAuth(lease, resource)
        return session.post(url, timeout=10).status_code


CLIENTS = [
    pytest.param(httpx_sync, id="httpx"),
    pytest.param(httpx_async, id="httpx-async"),
    pytest.param(requests_session, id="requests"),
]


@pytest.mark.parametrize("mode", ["wsgi", "asgi"])
@pytest.mark.parametrize("send", CLIENTS)
def test_the_client_sends_the_token_and_raises_stale_token_on_the_fences_409(
    mode: str, send: Post
) -> None:
    keeper = MemoryKeeper()
    with serving(mode, keeper) as service:
        orders = service.url + "/orders"
        lease = Holder(5)
        assert send(orders, lease, "orders") == 200
        assert send(orders, 7, "orders") == 200  # an int will do
        with pytest.raises(StaleToken) as refused:
            send(orders, lease, "orders")
        assert (refused.value.resource, refused.value.token, refused.value.highest) == (
            "orders",
            5,
            7,
        )
        lease.token = 9  # read at each request
        assert send(orders, lease, "orders") == 200
        assert keeper.highest("orders") == 9
        assert service.seen == [
            Admission("orders", 5),
            Admission("orders", 7),
            Admission("orders", 9),
        ]


@pytest.mark.parametrize("mode", ["wsgi", "asgi"])
@pytest.mark.parametrize("send", CLIENTS)
def test_the_apps_own_409_is_left_alone(mode: str, send: Post) -> None:
    with serving(mode, MemoryKeeper()) as service:
        assert send(service.url + "/conflict", 1, "orders") == 409


@pytest.mark.parametrize("send", CLIENTS)
def test_without_a_resource_only_the_token_is_sent(send: Post) -> None:
    with serving("asgi", MemoryKeeper(), resource=lambda request: request.path) as service:
        assert send(service.url + "/orders/1", 3, None) == 200
        with pytest.raises(StaleToken) as refused:
            send(service.url + "/orders/1", 2, None)
        assert refused.value.resource == "/orders/1"
    with serving("asgi", MemoryKeeper()) as service:  # the service wants the header
        assert send(service.url + "/orders", 3, None) == 400


@pytest.mark.parametrize("send", CLIENTS)
@pytest.mark.parametrize("token", [-1, 2**63, True, "5"])
def test_a_bad_token_is_refused_before_anything_is_sent(send: Post, token: object) -> None:
    with serving("asgi", MemoryKeeper()) as service:
        with pytest.raises(InvalidArgument, match="fencing token"):
            send(service.url + "/orders", token, "orders")  # type: ignore[arg-type]
        assert service.seen == []


def test_the_clients_work_with_real_leases(sqlite_store_url: str) -> None:
    import tenure

    with serving("asgi", MemoryKeeper()) as service, tenure.connect(sqlite_store_url) as client:
        with client.lock("orders", ttl=30) as lease:
            with httpx.Client(auth=HTTPXAuth(lease, "orders")) as http:
                assert http.post(service.url + "/orders").status_code == 200
            session = requests.Session()
            session.auth = RequestsAuth(lease, "orders")
            assert session.post(service.url + "/orders").status_code == 200
        assert service.seen == [Admission("orders", lease.token)] * 2


@pytest.mark.parametrize("mode", ["wsgi", "asgi"])
@pytest.mark.parametrize("send", CLIENTS)
def test_a_resource_name_need_not_be_ascii(mode: str, send: Post) -> None:
    keeper = MemoryKeeper()
    with serving(mode, keeper) as service:
        assert send(service.url + "/orders", 2, "café/ñ") == 200
        with pytest.raises(StaleToken) as refused:
            send(service.url + "/orders", 1, "café/ñ")
        assert refused.value.resource == "café/ñ" and keeper.highest("café/ñ") == 2


@pytest.mark.parametrize("mode", ["wsgi", "asgi"])
def test_a_resource_header_that_is_not_utf8_is_400(mode: str) -> None:
    with serving(mode, MemoryKeeper()) as service:
        answer = httpx.post(
            service.url + "/orders", headers={"Tenure-Token": "1", "Tenure-Resource": b"\xff"}
        )
        assert (answer.status_code, answer.text) == (400, "Tenure-Resource header must be UTF-8\n")


def test_the_fence_needs_neither_httpx_nor_requests() -> None:
    code = """
import sys
sys.modules["httpx"] = sys.modules["requests"] = None  # not installed
import tenure.fence
from tenure.fence import ASGIFence, MemoryKeeper, RequestsAuth, WSGIFence
ASGIFence(lambda scope, receive, send: None, MemoryKeeper())
WSGIFence(lambda environ, start_response: [], MemoryKeeper())
RequestsAuth(1, "orders")  # needs requests' types only to type-check
try:
    tenure.fence.HTTPXAuth
except ImportError:
    print("HTTPXAuth needs httpx")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "HTTPXAuth needs httpx\n"
