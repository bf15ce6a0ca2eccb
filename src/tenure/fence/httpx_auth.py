"""`HTTPXAuth`: an httpx client sends a lease's token to a fenced service (needs httpx)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator

import httpx

from ._clients import Stamping, stale

__all__ = ["HTTPXAuth"]


class HTTPXAuth(Stamping, httpx.Auth):
    """Sends ``lease``'s token (and ``resource``, unless the service names it) with each
    request, and raises ``tenure.StaleToken`` when the fence answers 409 stale::

        with httpx.Client(auth=HTTPXAuth(lease, "orders")) as http:   # or httpx.AsyncClient
            http.post(url, json=order)

    ``lease`` is a ``tenure.Lease``/``AsyncLease`` (its token is read at each request) or an
    int. Any other response, the app's own 409s included, is returned as it is.
    """

    def _stamp(self, request: httpx.Request) -> None:
        sent = self.sent()
        request.headers.update({name.encode(): value for name, value in sent.items()})
        if not all(value.isascii() for value in sent.values()):
            request.headers.encoding = "utf-8"  # httpx reads its headers as ASCII otherwise

    def sync_auth_flow(
        self, request: httpx.Request
    ) -> Generator[httpx.Request, httpx.Response, None]:
        """Stamp the request; read a 409's body and raise ``StaleToken`` if it is a refusal."""
        self._stamp(request)
        response = yield request
        if response.status_code == 409:
            refusal = stale(409, response.read())
            if refusal is not None:
                raise refusal

    async def async_auth_flow(
        self, request: httpx.Request
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        """`sync_auth_flow` for ``httpx.AsyncClient``."""
        self._stamp(request)
        response = yield request
        if response.status_code == 409:
            refusal = stale(409, await response.aread())
            if refusal is not None:
                raise refusal
