"""The etcd store's two transports: gRPC by default, etcd's JSON gateway with
``?transport=http`` or under trio, one JSON on both; and the generated messages up to date with
their .proto files. Real etcd members only (the shared 3-member cluster of plugin_etcd)."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

import tenure
from tenure import InvalidArgument
from tenure.stores.etcd import EtcdStore
from tenure.stores.etcd.gateway import Gateway
from tenure.stores.etcd.grpc_transport import GrpcTransport
from tenure.stores.etcd.keys import get_op, prefix_end, put_op, range_op

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
