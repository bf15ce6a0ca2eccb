"""etcd's JSON gateway over httpx: requests with fail-over, and watches. No protobuf.

Every call is a POST of a JSON body to ``/v3/...`` on one member: bytes are base64, int64s are
strings, zero fields are omitted (both ways). The client sticks to the member that last answered;
a member that refuses connections, is paused (no answer within ``request_timeout``) or has no
leader is skipped for the next one. A request is sent again only when it provably did not apply
(no connection) or when the caller says it is idempotent (``retry=True``); every failure leaves
as ``StoreUnavailable`` (one line) or as ``EtcdError`` (a definite answer, e.g. lease not found).
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio

from .._errors import InvalidArgument, StoreUnavailable

if TYPE_CHECKING:
    import httpx  # the ``etcd`` extra: imported when a Gateway is made, not with this module

JSON = dict[str, Any]

DEFINITE_CODES = frozenset({3, 5, 6, 7, 9, 11, 12, 16})
"""gRPC codes of a definite refusal (invalid, not found, exists, denied, precondition, out of
range, unimplemented, unauthenticated). Every other code ("no leader", "leader changed",
"request timed out", "context deadline exceeded" as Unknown…) means: try again, maybe elsewhere."""
NOT_FOUND = 5
ALREADY_EXISTS = 9  # etcd answers "lease already exists" with FailedPrecondition


def b64(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode("ascii")


def unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def prefix_end(prefix: bytes) -> bytes:
    """The end of the key range of everything starting with ``prefix`` (etcd's convention)."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


class EtcdError(Exception):
    """A definite error answer from etcd (the request did not apply)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class Gateway:
    """An HTTP client for a list of etcd members (``host:port``), with fail-over."""

    def __init__(
        self,
        endpoints: list[str],
        *,
        connect_timeout: float = 0.5,
        request_timeout: float = 2.0,
        budget: float = 8.0,
    ) -> None:
        self.endpoints = endpoints
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.budget = budget
        """Seconds one call keeps trying (idempotent calls, through an election)."""
        self.current = 0
        try:
            import httpx
        except ImportError:
            raise InvalidArgument(
                "the etcd store needs httpx: pip install 'tenure[etcd]'"
            ) from None
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(request_timeout, connect=connect_timeout),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=32),
        )

    def _base(self, index: int) -> str:
        return f"http://{self.endpoints[index]}"

    def _skip(self, index: int) -> None:
        """That member failed: the next call goes to the next one (unless moved on already)."""
        if self.current == index:
            self.current = (index + 1) % len(self.endpoints)

    def _unavailable(self, what: str, problem: str) -> StoreUnavailable:
        where = ", ".join(self.endpoints)
        return StoreUnavailable(f"etcd at {where}: {what}: {problem}")

    async def call(
        self, path: str, body: JSON, *, retry: bool = True, timeout: float | None = None
    ) -> JSON:
        """POST ``body`` to ``/v3/<path>``; retried on other members only if safe (see module).

        ``timeout``: seconds to wait for one member's answer (default ``request_timeout``).
        """
        import httpx

        per_member = httpx.Timeout(timeout or self.request_timeout, connect=self.connect_timeout)
        give_up = time.monotonic() + self.budget
        failures = 0
        refused = 0  # consecutive members that refused the connection outright
        while True:
            index = self.current
            try:
                response = await self._http.post(
                    f"{self._base(index)}/v3/{path}", json=body, timeout=per_member
                )
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
                problem = _describe(exc)  # not sent: always safe to send elsewhere
                refused = refused + 1 if isinstance(exc, httpx.ConnectError) else 0
            except httpx.HTTPError as exc:
                problem = _describe(exc)
                refused = 0
                if not retry:
                    raise self._unavailable(path, f"{problem} (outcome unknown)") from None
            else:
                refused = 0
                answer = _decode(response)
                if answer is None:
                    problem = f"HTTP {response.status_code} is not an etcd gateway answer"
                elif response.status_code == 200 and not isinstance(answer.get("error"), dict):
                    return answer
                else:
                    code, problem = _error_of(answer)
                    if code in DEFINITE_CODES:
                        raise EtcdError(code, problem)
                    if not retry and "no leader" not in problem:
                        raise self._unavailable(path, f"{problem} (outcome unknown)")
            self._skip(index)
            failures += 1
            if refused >= 2 * len(self.endpoints) or time.monotonic() > give_up:
                raise self._unavailable(path, problem)
            if failures % len(self.endpoints) == 0:  # every member failed once more: back off
                await anyio.sleep(min(0.05 * 2 ** (failures // len(self.endpoints)), 0.5))

    @asynccontextmanager
    async def watch(self, body: JSON) -> AsyncIterator[AsyncIterator[JSON]]:
        """A watch stream on the current member: yields each ``result`` message after creation.

        The caller bounds the time (no read timeout here). A broken stream ends the iteration
        (the member is skipped for later calls); the caller simply attempts again.
        """
        import httpx

        index = self.current
        timeout = httpx.Timeout(None, connect=self.connect_timeout)
        try:
            async with self._http.stream(
                "POST", f"{self._base(index)}/v3/watch", json=body, timeout=timeout
            ) as response:
                yield self._results(response, index)
        except httpx.HTTPError:
            self._skip(index)

    async def _results(self, response: httpx.Response, index: int) -> AsyncIterator[JSON]:
        if response.status_code != 200:
            self._skip(index)
            return
        async for line in response.aiter_lines():
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError:
                return
            result = message.get("result") if isinstance(message, dict) else None
            if not isinstance(result, dict):
                return  # an error message: the stream is over
            yield result

    async def aclose(self) -> None:
        await self._http.aclose()


def _decode(response: httpx.Response) -> JSON | None:
    try:
        answer = response.json()
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def _error_of(answer: JSON) -> tuple[int, str]:
    """(gRPC code, message) of an error answer: unary calls and streams say it differently."""
    error = answer.get("error")
    if isinstance(error, dict):  # a stream's error message
        return int(error.get("grpc_code", 2)), str(error.get("message") or "error")
    return int(answer.get("code", 2)), str(answer.get("message") or error or "error")


def _describe(exc: httpx.HTTPError) -> str:
    text = " ".join(str(exc).split())  # one line
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
