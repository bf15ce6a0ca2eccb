"""The etcd store's two transports: gRPC by default, etcd's JSON gateway with
``?transport=http`` or under trio, one JSON on both; and the generated messages up to date with
their .proto files. Real etcd members only (the shared 3-member cluster of plugin_etcd)."""

from __future__ import annotations

import asyncio
import base64
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from google.protobuf import json_format

import tenure
from tenure import InvalidArgument
from tenure.stores.etcd import EtcdStore
from tenure.stores.etcd.gateway import Gateway
from tenure.stores.etcd.grpc_ends import waits_for_status
from tenure.stores.etcd.grpc_transport import GrpcTransport, _methods
from tenure.stores.etcd.keys import (
    Keys,
    absent,
    created_at,
    first_op,
    get_op,
    last_op,
    prefix_end,
    put_op,
    range_op,
)
from tenure.stores.etcd.wirejson import fill, to_json

ROOT = Path(__file__).resolve().parents[3]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_the_generated_messages_match_their_proto_files() -> None:
    """scripts/etcd_protos.py --check regenerates the *_pb2.py files (grpcio-tools' protoc)
    and finds each as committed."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "etcd_protos.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_transport_is_chosen_by_the_url() -> None:
    grpc = EtcdStore.from_url("etcd://h1:2379/app")
    http = EtcdStore.from_url("etcd://h1:2379/app?transport=http&tls=true")
    assert isinstance(grpc._gw, GrpcTransport) and grpc.transport == "grpc"
    assert isinstance(http._gw, Gateway) and not isinstance(http._gw, GrpcTransport)
    assert grpc.url == "etcd://h1:2379/app"
    assert http.url == "etcd://h1:2379/app?tls=true&transport=http"
    assert EtcdStore.from_url(http.url).transport == "http"  # the URL shown opens the same
    with pytest.raises(InvalidArgument, match="bad transport 'h2'") as raised:
        EtcdStore.from_url("etcd://h1:2379/app?transport=h2")
    assert "\n" not in str(raised.value)


def same(answer: dict[str, Any]) -> dict[str, Any]:
    """An answer without what differs between two members answering it."""
    header = {k: v for k, v in answer["header"].items() if k not in ("member_id", "raft_term")}
    return {**answer, "header": header}


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_both_transports_speak_the_same_json(etcd_store_url: str) -> None:
    """A txn with a put, a sorted range and a count, and a read of it, through each transport:
    the same answers, bytes base64 and int64s strings (the gateway's JSON)."""
    grpc = EtcdStore.from_url(etcd_store_url)
    http = EtcdStore.from_url(etcd_store_url + "?transport=http")
    prefix = f"{grpc.namespace}/both/".encode()
    end = prefix_end(prefix)
    try:
        for index, store in enumerate((grpc, http)):
            key = prefix + str(index).encode()
            reads = [range_op(prefix, end), range_op(prefix, end, count_only=True), get_op(key)]
            body = {"compare": [], "success": [put_op(key, b"\x00\xff"), *reads], "failure": []}
            written = await store.request("kv/txn", body)
            assert written["succeeded"] is True
            assert isinstance(written["header"]["revision"], str)
            [_, found, count, own] = written["responses"]
            [kv] = own["response_range"]["kvs"]
            assert (kv["key"], kv["value"]) == (b64(key), b64(b"\x00\xff"))
            assert count["response_range"]["count"] == str(index + 1)
            assert len(found["response_range"]["kvs"]) == index + 1
        read = {"key": b64(prefix), "range_end": b64(end)}
        assert same(await grpc.request("kv/range", read)) == same(
            await http.request("kv/range", read)
        )
    finally:
        await grpc.aclose()
        await http.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_under_trio_the_default_store_takes_the_gateway(etcd_store_url: str) -> None:
    """gRPC needs asyncio: under trio the default URL locks, waits and watches through the
    gateway, which the store makes on first use."""
    async with tenure.connect_async(etcd_store_url) as client:
        store = client.store
        assert isinstance(store, EtcdStore) and isinstance(store._gw, GrpcTransport)
        lease = await client.lock("trio", ttl=5).acquire()
        assert store._gw._gateway is not None and not store._gw._channels
        got: list[int] = []

        async def wait() -> None:
            second = await client.lock("trio", ttl=5).acquire(timeout=10)
            got.append(second.token)
            await second.release()

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            with anyio.fail_after(10):  # queued behind the holder: it waits on a watch
                while [info.waiters for info in await client.locks()] != [1]:
                    await anyio.sleep(0.01)
            await lease.release()
        assert got and got[0] > lease.token
        assert store.wakeups >= 1  # woken by the watch (the gateway's), not by polling


# -- etcd's JSON and the messages ---------------------------------------------------------


def attempt_txn() -> dict[str, Any]:
    """A first attempt's txn as the store makes it (nested txn, count, sorted ranges)."""
    keys = Keys("ns")
    prefix = keys.prefix("a/b")
    end = prefix_end(prefix)
    key = keys.queued(prefix, 2**62 + 5, 1)
    free = [absent({"key": b64(prefix), "range_end": b64(end)}), absent({"key": b64(key)})]
    success = [
        put_op(key, b'{"host": "h"}', 2**62 + 5),
        first_op(prefix, end),
        range_op(prefix, end, count_only=True),
        last_op(prefix, end, 2),
        {"request_txn": {"compare": free, "success": [{"request_delete_range": {}}]}},
    ]
    return {"compare": [created_at(key, 7)], "success": success, "failure": [get_op(key)]}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("kv/txn", attempt_txn()),
        ("watch", {"create_request": {"key": "YQ==", "start_revision": "9", "filters": ["NOPUT"]}}),
        ("lease/grant", {"ID": str(2**63 - 1), "TTL": 3}),
        ("kv/range", {"key": "YQ==", "sort_order": 1, "limit": "1", "serializable": True}),
        ("auth/authenticate", {"name": "u", "password": "p"}),
    ],
)
def test_bodies_become_the_messages_protobuf_would_make(path: str, body: dict[str, Any]) -> None:
    method = _methods()[path]
    assert fill(method.request(), body) == json_format.ParseDict(body, method.request())


def test_answers_become_the_json_protobuf_would_make() -> None:
    from tenure.stores.etcd.proto import kv_pb2, rpc_pb2

    kv = kv_pb2.KeyValue(key=b"k\xff", value=b"", create_revision=2**40, lease=-1, version=1)
    txn = rpc_pb2.TxnResponse(succeeded=True)
    txn.header.revision = 12
    txn.responses.add().response_range.kvs.append(kv)
    txn.responses.add().response_put.SetInParent()  # present, empty: {}
    txn.responses.add().response_range.count = 3
    watch = rpc_pb2.WatchResponse(created=True, canceled=True, cancel_reason="compacted")
    watch.events.add(type=kv_pb2.Event.DELETE, kv=kv)
    watch.events.add(type=kv_pb2.Event.PUT, kv=kv)
    status = rpc_pb2.StatusResponse(leader=2**64 - 1, version="3.4.23", raftTerm=4)
    for message in (txn, watch, status, rpc_pb2.LeaseTimeToLiveResponse(TTL=-1, keys=[b"x"])):
        expected = json_format.MessageToDict(message, preserving_proto_field_name=True)
        assert to_json(message) == expected


@pytest.mark.parametrize(
    "body",
    [
        {"key": "not base64!"},
        {"limit": "ten"},
        {"sort_order": "SIDEWAYS"},
        {"nope": 1},
        {"limit": True},
    ],
)
def test_a_bad_body_is_one_invalid_argument(body: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument) as raised:
        fill(_methods()["kv/range"].request(), body)
    assert "RangeRequest" in str(raised.value) and "\n" not in str(raised.value)


def grpc_status_waits() -> list[asyncio.Task[Any]]:
    return [task for task in asyncio.all_tasks() if waits_for_status(task)]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_closed_store_leaves_grpc_nothing_owed_to_its_loop(etcd_store_url: str) -> None:
    """grpc's core hands each completion to the loop that started the operation; one that comes
    back after that loop closed fails in whichever loop runs next ("Event loop is closed", a
    later test's). So after ``aclose`` no task of grpc's is left on the loop: not a read of a
    watch cancelled while waiting, not the status of its stream. grpc's status wait is found by
    its task's name (`grpc_ends`), asserted while the stream is open: a grpc that renames it
    fails here rather than bringing the flake back."""
    before = asyncio.all_tasks()
    store = EtcdStore.from_url(etcd_store_url)
    watch = await store.watch("idle")
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch.next, 60)
            with anyio.fail_after(5):
                while not grpc_status_waits():  # the stream is open
                    await anyio.sleep(0.01)
            assert len(grpc_status_waits()) == 1
            await watch.aclose()  # the waiting read is cut: its stream is cancelled
    finally:
        await store.aclose()
    assert asyncio.all_tasks() == before


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_closed_clients_with_a_waiter_leave_grpc_nothing_owed(etcd_store_url: str) -> None:
    """The same for a waiter cut while it waits on its client's shared Watch stream, beside the
    sessions' keep-alive streams: once both clients are closed, no task of grpc's is left."""
    before = asyncio.all_tasks()
    async with (
        tenure.connect_async(etcd_store_url) as holder,
        tenure.connect_async(etcd_store_url) as client,
    ):
        held = await holder.lock("busy", ttl=5).acquire()
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.lock("busy", ttl=5).acquire)
            with anyio.fail_after(5):  # queued, and a stream open (awaited, not assumed)
                while [info.waiters for info in await holder.locks("busy")] != [1]:
                    await anyio.sleep(0.01)
                while not grpc_status_waits():
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
        await held.release()
    assert asyncio.all_tasks() == before
