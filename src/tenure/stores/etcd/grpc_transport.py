"""etcd's own gRPC API over grpcio (`GrpcTransport`): the default transport of ``etcd://``.

Each member has one HTTP/2 channel (``grpc.aio``, made on first use in the running event loop).
A call is one unary RPC (``lease/keepalive``: one request on a LeaseKeepAlive stream), its body
converted from etcd's gateway JSON and its answer back (`wirejson`: protobuf's JSON mapping with
the .proto field names, as the gateway does), so the store above speaks the same JSON on either
transport. The fail-over, retry rules, tokens and TLS probe are `Transport`'s. gRPC needs
asyncio: under another event loop (trio) every request goes through a `Gateway` instead.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from ..._errors import InvalidArgument
from .gateway import Gateway
from .grpc_ends import STREAMS
from .grpc_waits import SharedWatches
from .transport import (
    JSON,
    PROBE,
    EtcdError,
    Failed,
    Transport,
    answered,
    describe,
    stale_token,
)
from .wirejson import fill, to_json

UNIMPLEMENTED = 12
INVALID_ARGUMENT = 3
CHANNEL_OPTIONS = [
    # A member that comes back is tried again within a second (grpc's default backs off to 2 min).
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.max_receive_message_length", -1),  # a range's answer is as large as etcd makes it
]


@dataclass(frozen=True)
class Method:
    """One RPC of etcd's API, as the transport calls it."""

    name: str
    """``/etcdserverpb.KV/Txn``: etcd's own service names (the wire's)."""
    request: Any
    response: Any
    streams: bool
    """Client-streaming (LeaseKeepAlive, Watch): one request written on a stream."""


def _methods() -> dict[str, Method]:
    """Every gateway path (``kv/txn``) as its RPC, from the generated descriptors."""
    from google.protobuf import message_factory

    from .proto import rpc_pb2
    from .proto.paths import PATHS

    found: dict[str, Method] = {}
    for path, name in PATHS.items():
        service, method = name.split("/")
        descriptor = rpc_pb2.DESCRIPTOR.services_by_name[service].methods_by_name[method]
        found[path] = Method(
            f"/etcdserverpb.{service}/{method}",
            message_factory.GetMessageClass(descriptor.input_type),
            message_factory.GetMessageClass(descriptor.output_type),
            bool(descriptor.client_streaming),
        )
    return found


@dataclass(frozen=True)
class TLSFiles:
    """The files of a TLS channel: ``ca`` (None: the system's roots), a client certificate."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None


class GrpcTransport(Transport):
    """A gRPC client for a list of etcd members (``host:port``), with fail-over."""

    def __init__(
        self,
        endpoints: list[str],
        *,
        connect_timeout: float = 0.5,
        request_timeout: float = 2.0,
        budget: float = 8.0,
        tls: ssl.SSLContext | None = None,
        tls_files: TLSFiles | None = None,
        username: str | None = None,
        password: str | None = None,
    ) -> None:
        """``tls`` (the context the TLS probe uses) and ``tls_files`` (the channels' files)
        come together: both or neither."""
        super().__init__(
            endpoints,
            connect_timeout=connect_timeout,
            request_timeout=request_timeout,
            budget=budget,
            tls=tls,
            username=username,
            password=password,
        )
        # grpc's core logs to stderr itself, a TLS refusal in three lines the store says in one:
        # quiet unless the user asked for its log (before grpc's first import only).
        os.environ.setdefault("GRPC_VERBOSITY", "NONE")
        try:
            import grpc
            import grpc.aio
        except ImportError:
            raise InvalidArgument(
                "the etcd store needs grpcio and protobuf: pip install 'tenure[etcd]'"
            ) from None
        self._grpc = grpc
        self._methods = _methods()
        self._credentials = None if tls is None else _credentials(grpc, tls_files or TLSFiles())
        self._loop: asyncio.AbstractEventLoop | None = None
        self._channels: dict[int, Any] = {}
        self._calls: dict[tuple[int, str], Any] = {}
        self._unary: set[asyncio.Future[Any]] = set()
        self._running: set[asyncio.Future[Any]] = set()
        """grpc's awaitables this transport started and that have not ended (``_unary``: the
        unary calls among them), on every loop: `aclose` waits for them."""
        self._gateway: Gateway | None = None
        self._waits = SharedWatches(self)
        self._settings = {"connect_timeout": connect_timeout, "request_timeout": request_timeout}

    # -- channels --------------------------------------------------------------------------

    def _channel(self, index: int) -> Any:
        """Member ``index``'s channel in the running event loop (one per member)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # channels belong to the loop that made them
            self._loop, self._channels, self._calls = loop, {}, {}
        channel = self._channels.get(index)
        if channel is None:
            aio, target = self._grpc.aio, self.endpoints[index]
            if self._credentials is None:
                channel = aio.insecure_channel(target, CHANNEL_OPTIONS)
            else:
                channel = aio.secure_channel(target, self._credentials, CHANNEL_OPTIONS)
            self._channels[index] = channel
        return channel

    def _callable(self, index: int, method: Method) -> Any:
        found = self._calls.get((index, method.name))
        if found is None:
            channel = self._channel(index)
            make = channel.stream_stream if method.streams else channel.unary_unary
            found = make(
                method.name,
                request_serializer=method.request.SerializeToString,
                response_deserializer=method.response.FromString,
            )
            self._calls[(index, method.name)] = found
        return found

    async def _connected(self, index: int, probed: set[int]) -> None:
        """Member ``index``'s channel connected within ``connect_timeout``, else `Failed` (not
        sent): refused (the last connection attempt failed), or TLS (the probe tells why)."""
        state = self._grpc.ChannelConnectivity
        channel = self._channel(index)
        now = channel.get_state(try_to_connect=True)
        if now == state.READY:
            return
        # In a back-off after a failed attempt (TRANSIENT_FAILURE), the member is as good as
        # refusing: grpc tries it again within a second, and a later call finds it back.
        with anyio.move_on_after(self.connect_timeout):
            while now not in (state.READY, state.TRANSIENT_FAILURE):
                await self.grpc_await(channel.wait_for_state_change(now))
                now = channel.get_state(try_to_connect=True)
        if now == state.READY:
            return
        failed = now == state.TRANSIENT_FAILURE
        tls = await self._probed(index, probed) if failed else None
        if tls is not None:
            raise Failed(tls, sent=False, tls=True)
        problem = "connection failed" if failed else f"no connection within {self.connect_timeout}s"
        raise Failed(problem, sent=False, refused=failed)

    # -- requests --------------------------------------------------------------------------

    def _fallback(self) -> Gateway | None:
        """None under asyncio; else the `Gateway` every request takes instead."""
        try:
            asyncio.get_running_loop()
            return None
        except RuntimeError:
            pass
        if self._gateway is None:
            self._gateway = Gateway(
                self.endpoints,
                **self._settings,
                tls=self._tls,
                username=self._username,
                password=self._password,
            )
        self._gateway.budget = self.budget
        return self._gateway

    async def call(
        self, path: str, body: JSON, *, retry: bool = True, timeout: float | None = None
    ) -> JSON:
        gateway = self._fallback()
        if gateway is not None:
            return await gateway.call(path, body, retry=retry, timeout=timeout)
        return await super().call(path, body, retry=retry, timeout=timeout)

    def _request(self, path: str, body: JSON) -> tuple[Method, Any]:
        method = self._methods.get(path)
        if method is None:
            raise EtcdError(UNIMPLEMENTED, f"no etcd API call {path!r}")
        try:
            return method, fill(method.request(), body)
        except InvalidArgument as exc:
            raise EtcdError(INVALID_ARGUMENT, f"{path}: {exc}") from None

    async def _send(
        self, index: int, path: str, body: JSON, timeout: float, token: str, probed: set[int]
    ) -> JSON:
        method, request = self._request(path, body)
        await self._connected(index, probed)
        metadata = (("token", token),) if token else None
        rpc = self._callable(index, method)
        try:
            if not method.streams:
                unary = rpc(request, timeout=timeout, metadata=metadata)
                reply = await self.grpc_await(unary, unary=True)
                return to_json(reply)
            call = STREAMS.made(rpc(timeout=timeout, metadata=metadata))
            try:
                await self.grpc_await(call.write(request))
                reply = await self.grpc_await(call.read())
            finally:
                call.cancel()
        except self._grpc.aio.AioRpcError as exc:
            raise await self._failure(index, exc, timeout, probed) from None
        if reply is self._grpc.aio.EOF:
            raise Failed(f"{path}: the stream ended without an answer", sent=True)
        return {"result": to_json(reply)}  # as the gateway answers a stream

    async def _failure(self, index: int, exc: Any, timeout: float, probed: set[int]) -> Exception:
        """What an RPC's error means: `EtcdError` (a definite answer) or `Failed`."""
        code, details = exc.code(), " ".join(str(exc.details() or "").split())
        number = code.value[0]
        if details.startswith("etcdserver:") or number not in (1, 4, 14):
            return answered(number, details or code.name)
        if code == self._grpc.StatusCode.DEADLINE_EXCEEDED:
            return Failed(f"no answer within {timeout:g}s", sent=True)
        if code == self._grpc.StatusCode.UNAVAILABLE:
            if "failed to connect" in details.lower():
                return Failed(details, sent=False, refused=True)
            tls = await self._probed(index, probed)  # closed without a word: a TLS refusal?
            if tls is not None:
                return Failed(tls, sent=False, tls=True)
        return Failed(describe(exc) if not details else f"{code.name}: {details}", sent=True)

    async def _leader_at(self, index: int) -> bool:
        method = self._methods["maintenance/status"]
        token = self._token or ""
        try:
            with anyio.move_on_after(PROBE):
                await self._connected(index, {index})  # no TLS probe: only who answers
                rpc = self._callable(index, method)
                metadata = (("token", token),) if token else None
                request = rpc(method.request(), timeout=PROBE, metadata=metadata)
                reply = await self.grpc_await(request, unary=True)
                return bool(reply.leader)
        except (Failed, self._grpc.aio.AioRpcError):
            pass
        return False

    # -- watches ---------------------------------------------------------------------------

    @asynccontextmanager
    async def watch(self, body: JSON) -> AsyncIterator[AsyncIterator[JSON]]:
        gateway = self._fallback()
        if gateway is not None:
            async with gateway.watch(body) as results:
                yield results
            return
        await self._token_for_watch()
        results = self._results(body, self.current)
        try:
            yield results
        finally:
            await results.aclose()

    async def _results(self, body: JSON, index: int) -> AsyncGenerator[JSON, None]:
        method, request = self._request("watch", body)
        for _ in range(2):
            token = self._token or ""
            try:
                await self._connected(index, {index})
            except Failed:
                self._skip(index)
                return
            rpc = self._callable(index, method)
            call = STREAMS.made(rpc(metadata=(("token", token),) if token else None))
            try:
                await self.grpc_await(call.write(request))
                while True:
                    reply = await self.grpc_await(call.read())
                    if reply is self._grpc.aio.EOF:
                        return
                    result = to_json(reply)
                    reason = str(result.get("cancel_reason") or "")
                    if result.get("canceled") and token and stale_token(reason):
                        break  # refused at creation: nothing was watched yet
                    yield result
            except self._grpc.aio.AioRpcError:
                self._skip(index)
                return
            finally:
                call.cancel()
            if not await self._fresh_token(token):
                return

    async def wait_event(self, body: JSON) -> bool:
        if self._fallback() is not None:
            return await super().wait_event(body)
        return await self._waits.wait(self._request("watch", {"create_request": body})[1])

    # What `SharedWatches` needs of the transport.

    @property
    def grpc(self) -> Any:
        return self._grpc

    async def open_watch_stream(self) -> tuple[int, Any, str] | None:
        """A new Watch stream to the member in use: its index, the call and the token it
        was opened with; None (the member skipped) if it cannot be reached."""
        token = await self._token_for_watch()
        index = self.current
        try:
            await self._connected(index, {index})
        except Failed:
            self._skip(index)
            return None
        rpc = self._callable(index, self._methods["watch"])
        return index, STREAMS.made(rpc(metadata=(("token", token),) if token else None)), token

    def watch_cancel(self, watch_id: int) -> Any:
        return self._request("watch", {"cancel_request": {"watch_id": str(watch_id)}})[1]

    def skip(self, index: int) -> None:
        self._skip(index)

    @staticmethod
    def is_stale_token(reason: str) -> bool:
        return stale_token(str(reason or ""))

    async def fresh_token_for_watch(self, stale: str) -> None:
        await self._fresh_token(stale)

    async def grpc_await(self, awaitable: Any, *, unary: bool = False) -> Any:
        """Await one of grpc's awaitables behind a shield. A cancellation reaches the caller as
        anyio made it: grpc awaits tasks of its own, whose cancellation raises a bare
        ``CancelledError`` that anyio (which knows its cancellations by their message) would
        let out of every cancel scope. grpc's task is not cancelled: its operation would stay
        owed to this loop (`grpc_ends`). It ends on its own: a unary call by its deadline, a
        stream's read or write when the stream is cancelled (each is, in a ``finally``), a wait
        for a channel's state at the next change or the channel's close."""
        task = asyncio.ensure_future(awaitable)
        for tracked in (self._running, self._unary) if unary else (self._running,):
            tracked.add(task)
            task.add_done_callback(tracked.discard)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(_retrieved)
            raise

    async def aclose(self) -> None:
        await self._waits.aclose()
        channels, self._channels, self._calls = list(self._channels.values()), {}, {}
        if channels:  # (none under trio)
            # Nothing of grpc's may stay owed to this loop (`grpc_ends`). The unary calls first,
            # each ended by its deadline: a channel's close would cancel them. Then the close
            # cancels the streams and ends the state waits, whose ends come back.
            loop = asyncio.get_running_loop()
            unary = [task for task in self._unary if task.get_loop() is loop]
            if unary:
                await asyncio.wait(unary, timeout=self.budget)
            for channel in channels:
                await channel.close()
            running = [task for task in self._running if task.get_loop() is loop]
            if running:
                await asyncio.wait(running, timeout=SETTLE)
            await STREAMS.settled(SETTLE)
        if self._gateway is not None:
            await self._gateway.aclose()


SETTLE = 2.0
"""Seconds at most a close waits for grpc's ends once it cancelled the calls (they come back in
milliseconds; this bounds the wait if they did not)."""


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Mark ``task``'s outcome as seen: nobody waits for it any more."""
    if not task.cancelled():
        task.exception()


def _credentials(grpc: Any, files: TLSFiles) -> Any:
    """The channels' TLS credentials: ``ca`` or the system's roots as OpenSSL finds them
    ($SSL_CERT_FILE, else its default file; grpc's own bundle otherwise), and the client
    certificate if one is given. The files were checked by the store's ``ssl_context``."""

    def read(path: str | None) -> bytes | None:
        return Path(path).read_bytes() if path else None

    roots = read(files.ca)
    if roots is None:
        found = os.environ.get("SSL_CERT_FILE") or ssl.get_default_verify_paths().cafile
        roots = read(found) if found and Path(found).is_file() else None
    key = read(files.key or files.cert)
    return grpc.ssl_channel_credentials(
        root_certificates=roots,
        private_key=key if files.cert else None,
        certificate_chain=read(files.cert),
    )
