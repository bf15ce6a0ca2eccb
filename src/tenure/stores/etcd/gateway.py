"""etcd's JSON gateway over httpx (`Gateway`): one ``POST /v3/<path>`` to one member, watch
streams as JSON lines, and the status probe. The fail-over, retry rules, tokens and TLS probe
are `Transport`'s. Chosen by ``?transport=http``, and where gRPC cannot run (under trio).
"""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from ..._errors import InvalidArgument
from .._connect import tls_failure
from .transport import JSON, PROBE, Failed, Transport, answered, describe, stale_token

if TYPE_CHECKING:
    import httpx  # the ``etcd`` extra: imported when a Gateway is made, not with this module


class Gateway(Transport):
    """An HTTP client for a list of etcd members (``host:port``), with fail-over."""

    def __init__(
        self,
        endpoints: list[str],
        *,
        connect_timeout: float = 0.5,
        request_timeout: float = 2.0,
        budget: float = 8.0,
        tls: ssl.SSLContext | None = None,
        username: str | None = None,
        password: str | None = None,
    ) -> None:
        super().__init__(
            endpoints,
            connect_timeout=connect_timeout,
            request_timeout=request_timeout,
            budget=budget,
            tls=tls,
            username=username,
            password=password,
        )
        try:
            import httpx
        except ImportError:
            raise InvalidArgument(
                "the etcd store needs httpx: pip install 'tenure[etcd]'"
            ) from None
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(request_timeout, connect=connect_timeout),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=32),
            verify=tls if tls is not None else True,
        )

    def _base(self, index: int) -> str:
        return f"{'https' if self._tls else 'http'}://{self.endpoints[index]}"

    @staticmethod
    def _headers(token: str) -> dict[str, str]:
        return {"Authorization": token} if token else {}

    async def _send(
        self, index: int, path: str, body: JSON, timeout: float, token: str, probed: set[int]
    ) -> JSON:
        import httpx

        try:
            response = await self._http.post(
                f"{self._base(index)}/v3/{path}",
                json=body,
                timeout=httpx.Timeout(timeout, connect=self.connect_timeout),
                headers=self._headers(token),
            )
        except (httpx.HTTPError, ssl.SSLError) as exc:  # httpx lets some SSL errors out
            tls = await self._tls_problem(index, exc, probed)
            not_sent = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
            raise Failed(
                tls or describe(exc),
                sent=not tls and not isinstance(exc, not_sent),
                refused=isinstance(exc, httpx.ConnectError) and not tls,
                tls=tls is not None,
            ) from None
        answer = _decode(response)
        if answer is None:
            problem = f"HTTP {response.status_code} is not an etcd gateway answer"
            raise Failed(problem, sent=False)
        if response.status_code == 200 and not isinstance(answer.get("error"), dict):
            return answer
        raise answered(*_error_of(answer))

    async def _leader_at(self, index: int) -> bool:
        import httpx

        with contextlib.suppress(httpx.HTTPError, ssl.SSLError, ValueError):
            response = await self._http.post(
                f"{self._base(index)}/v3/maintenance/status",
                json={},
                timeout=httpx.Timeout(PROBE, connect=PROBE),
                headers=self._headers(self._token or ""),
            )
            answer = _decode(response)
            return response.status_code == 200 and answer is not None and _leader(answer)
        return False

    async def _tls_problem(self, index: int, exc: BaseException, probed: set[int]) -> str | None:
        """One line if ``exc`` is (or hides) a TLS failure at member ``index``, else None."""
        import httpx

        reason = tls_failure(exc)
        if reason is not None:
            return self._hint(reason)
        if isinstance(exc, (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)):
            return await self._probed(index, probed)  # closed without a word: a TLS refusal?
        return None

    @asynccontextmanager
    async def watch(self, body: JSON) -> AsyncIterator[AsyncIterator[JSON]]:
        import httpx

        await self._token_for_watch()
        index = self.current
        results = self._results(body, index)
        try:
            yield results
        except (httpx.HTTPError, ssl.SSLError):
            self._skip(index)
        finally:
            await results.aclose()

    async def _results(self, body: JSON, index: int) -> AsyncGenerator[JSON, None]:
        import httpx

        timeout = httpx.Timeout(None, connect=self.connect_timeout)
        for _ in range(2):
            token = self._token or ""
            async with self._http.stream(
                "POST",
                f"{self._base(index)}/v3/watch",
                json=body,
                timeout=timeout,
                headers=self._headers(token),
            ) as response:
                if response.status_code != 200:
                    self._skip(index)
                    return
                async for result in _messages(response):
                    reason = str(result.get("cancel_reason") or "")
                    if result.get("canceled") and token and stale_token(reason):
                        break  # refused at creation: nothing was watched yet
                    yield result
                else:
                    return
            if not await self._fresh_token(token):
                return

    async def aclose(self) -> None:
        await self._http.aclose()


async def _messages(response: httpx.Response) -> AsyncIterator[JSON]:
    """The ``result`` messages of a watch stream, until it ends or sends an error."""
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


def _leader(status: JSON) -> bool:
    return str(status.get("leader", "0")) != "0"


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
