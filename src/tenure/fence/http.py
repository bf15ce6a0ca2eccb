"""Fence an HTTP service: the holder sends its token in a header, the service refuses a stale one.

Server side, a middleware in front of the app reads the token (``Tenure-Token``) and the
resource (``Tenure-Resource``, or fixed, or derived from the request), admits the token in a
keeper (`tenure.fence.keepers`) and only then hands the request on::

    app.add_middleware(ASGIFence, keeper=MemoryKeeper())           # Starlette, FastAPI
    flask_app.wsgi_app = WSGIFence(flask_app.wsgi_app, SQLKeeper(connect))   # Flask, Django

A stale token is answered ``409`` with a JSON body (`stale_body`), a missing or malformed one
``400`` with one line of text. The admitted token is in the ASGI scope / WSGI environ
(`admission`), for an app that admits it again in its own transaction (the strongest form).

Client side, `HTTPXAuth` (httpx, sync and async) and `RequestsAuth` (requests) send a lease's
token and turn the fence's 409 into ``tenure.StaleToken``.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import anyio.to_thread

from .._errors import InvalidArgument, StaleToken
from ._tokens import check
from .keepers import AsyncKeeper, Keeper

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

    from .httpx_auth import HTTPXAuth
    from .requests_auth import RequestsAuth

__all__ = [
    "ADMISSION",
    "RESOURCE_HEADER",
    "TOKEN_HEADER",
    "UNSAFE_METHODS",
    "ASGIFence",
    "Admission",
    "FenceRequest",
    "HTTPXAuth",
    "RequestsAuth",
    "WSGIFence",
    "admission",
    "stale_body",
]

TOKEN_HEADER = "Tenure-Token"
"""The request header with the holder's fencing token, a decimal integer."""
RESOURCE_HEADER = "Tenure-Resource"
"""The request header that names the fenced resource (unless the service names it)."""
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
"""The methods that must carry a token by default. A request of another method that carries
one is admitted all the same: send the token with reads too (docs/fencing.md says why)."""
ADMISSION = "tenure.fence"
"""The key of the `Admission` in the ASGI scope and the WSGI environ."""
STALE = "stale fencing token"
"""The ``error`` of a 409 body that refuses a stale token (other 409s are the app's own)."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True)
class Admission:
    """A token the fence admitted for a resource, handed to the app with its request."""

    resource: str
    token: int


@dataclass(frozen=True)
class FenceRequest:
    """What a ``resource=`` callable is given: the method, the path (percent-decoded) and the
    headers (lower-case names; repeated headers joined with ``", "``)."""

    method: str
    path: str
    headers: Mapping[str, str]


ResourceOf = str | Callable[[FenceRequest], str] | None


def admission(scope: Mapping[str, Any]) -> Admission | None:
    """The `Admission` of this request (an ASGI scope or a WSGI environ), or None if the
    request carried no token."""
    found = scope.get(ADMISSION)
    return found if isinstance(found, Admission) else None


def stale_body(exc: StaleToken) -> dict[str, object]:
    """The JSON body of a 409 that refuses ``exc``'s token: an app that admits in its own
    transaction answers its ``StaleToken`` with it, so the clients raise ``StaleToken`` too."""
    return {"error": STALE, "resource": exc.resource, "token": exc.token, "highest": exc.highest}


class _Rules:
    """Which requests are fenced, and their resource and token: free of I/O, for both
    middlewares."""

    def __init__(
        self,
        resource: ResourceOf,
        methods: Iterable[str] | Literal["*"],
        token_header: str,
        resource_header: str,
    ) -> None:
        if resource is not None and not isinstance(resource, str) and not callable(resource):
            raise InvalidArgument(f"resource must be a string, a callable or None: {resource!r}")
        if isinstance(resource, str):
            check(resource, 0)
        if methods == "*":
            self.methods: frozenset[str] | None = None
        elif isinstance(methods, str):
            raise InvalidArgument(f'methods must be a collection of methods or "*": {methods!r}')
        else:
            self.methods = frozenset(m.upper() for m in methods)
        self.resource = resource
        self.token_header = token_header
        self.resource_header = resource_header
        self._token_key = token_header.lower()
        self._resource_key = resource_header.lower()

    def admission(self, request: FenceRequest) -> Admission | None:
        """What to admit for ``request``; None lets it pass without a token. A bad or missing
        token or resource: `InvalidArgument` with one line (the 400's body)."""
        raw = request.headers.get(self._token_key)
        if raw is None:
            if self.methods is not None and request.method.upper() not in self.methods:
                return None
            raise InvalidArgument(f"missing {self.token_header} header: send the lease's token")
        token = self._token(raw)
        resource = self._resource(request)
        check(resource, token)
        return Admission(resource, token)

    def _token(self, raw: str) -> int:
        text = raw.strip()
        if not _INTEGER.fullmatch(text):
            shown = text if len(text) <= 40 else text[:40] + "…"
            raise InvalidArgument(f"{self.token_header} header must be an integer, not {shown!r}")
        return int(text)  # a negative or too large one: check() says so

    def _resource(self, request: FenceRequest) -> str:
        if isinstance(self.resource, str):
            return self.resource
        if self.resource is not None:
            return self.resource(request)
        found = request.headers.get(self._resource_key)
        if found is None:
            raise InvalidArgument(f"missing {self.resource_header} header: name the resource")
        return _utf8(found, self.resource_header)


def _utf8(value: str, header: str) -> str:
    """A header's text as sent in UTF-8 (both servers hand headers over decoded latin-1)."""
    try:
        return value.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        raise InvalidArgument(f"{header} header must be UTF-8") from None


_INTEGER = re.compile(r"-?[0-9]{1,40}")  # ASCII digits only (int() would take "٣" and "1_0")


def _body_400(exc: InvalidArgument) -> bytes:
    return (" ".join(str(exc).split()) + "\n").encode()


def _body_409(exc: StaleToken) -> bytes:
    return json.dumps(stale_body(exc)).encode()


_TEXT = "text/plain; charset=utf-8"
_JSON = "application/json"


class ASGIFence:
    """ASGI middleware (Starlette, FastAPI) that admits each fenced request's token in
    ``keeper`` before ``app`` sees it.

    ``keeper``: an `AsyncKeeper`, or a `Keeper` (run in a worker thread), or None to check
    the headers only and leave the admission to the app's own transaction. ``resource``: None
    (the ``Tenure-Resource`` header names it), a string (this service's one resource), or a
    callable given a `FenceRequest`. ``methods``: those that must carry a token, or ``"*"``
    for all. Only HTTP requests are fenced (not websockets or lifespan events).
    """

    def __init__(
        self,
        app: ASGIApp,
        keeper: Keeper | AsyncKeeper | None,
        *,
        resource: ResourceOf = None,
        methods: Iterable[str] | Literal["*"] = UNSAFE_METHODS,
        token_header: str = TOKEN_HEADER,
        resource_header: str = RESOURCE_HEADER,
    ) -> None:
        self.app = app
        self.keeper = keeper
        self._rules = _Rules(resource, methods, token_header, resource_header)
        self._awaits = keeper is not None and inspect.iscoroutinefunction(keeper.admit)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Admit the request's token, then call the app; or answer 400 or 409 instead."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = FenceRequest(scope["method"], scope["path"], _asgi_headers(scope))
        try:
            admitted = self._rules.admission(request)
            if admitted is not None:
                await self._admit(admitted)
        except InvalidArgument as exc:
            await _asgi_reply(send, 400, _TEXT, _body_400(exc))
            return
        except StaleToken as exc:
            await _asgi_reply(send, 409, _JSON, _body_409(exc))
            return
        if admitted is not None:
            scope = {**scope, ADMISSION: admitted}
        await self.app(scope, receive, send)

    async def _admit(self, admitted: Admission) -> None:
        keeper = self.keeper
        if keeper is None:
            return
        if self._awaits:
            await keeper.admit(admitted.resource, admitted.token)  # type: ignore[misc]
        else:
            await anyio.to_thread.run_sync(keeper.admit, admitted.resource, admitted.token)


def _asgi_headers(scope: Scope) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in scope["headers"]:
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers


async def _asgi_reply(send: Send, status: int, content_type: str, body: bytes) -> None:
    headers = [(b"content-type", content_type.encode()), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class WSGIFence:
    """WSGI middleware (Flask, Django) that admits each fenced request's token in ``keeper``
    before ``app`` sees it: `ASGIFence`'s arguments, with a blocking `Keeper` (or None)."""

    def __init__(
        self,
        app: WSGIApplication,
        keeper: Keeper | None,
        *,
        resource: ResourceOf = None,
        methods: Iterable[str] | Literal["*"] = UNSAFE_METHODS,
        token_header: str = TOKEN_HEADER,
        resource_header: str = RESOURCE_HEADER,
    ) -> None:
        if keeper is not None and inspect.iscoroutinefunction(keeper.admit):
            raise InvalidArgument(f"WSGIFence needs a blocking keeper, not {keeper!r}")
        self.app = app
        self.keeper = keeper
        self._rules = _Rules(resource, methods, token_header, resource_header)

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        """Admit the request's token, then call the app; or answer 400 or 409 instead."""
        # PEP 3333 hands the path over as bytes decoded latin-1; ASGI gives it decoded UTF-8.
        path = environ.get("PATH_INFO", "")
        with contextlib.suppress(UnicodeEncodeError):  # else a server decoded it already
            path = path.encode("latin-1").decode("utf-8", "replace")
        request = FenceRequest(environ["REQUEST_METHOD"], path, _wsgi_headers(environ))
        try:
            admitted = self._rules.admission(request)
            if admitted is not None and self.keeper is not None:
                self.keeper.admit(admitted.resource, admitted.token)
        except InvalidArgument as exc:
            return _wsgi_reply(start_response, "400 Bad Request", _TEXT, _body_400(exc))
        except StaleToken as exc:
            return _wsgi_reply(start_response, "409 Conflict", _JSON, _body_409(exc))
        if admitted is not None:
            environ[ADMISSION] = admitted
        return self.app(environ, start_response)


def _wsgi_headers(environ: WSGIEnvironment) -> dict[str, str]:
    headers = {
        key[5:].replace("_", "-").lower(): value
        for key, value in environ.items()
        if key.startswith("HTTP_")
    }
    for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(key):
            headers[key.replace("_", "-").lower()] = environ[key]
    return headers


def _wsgi_reply(
    start_response: StartResponse, status: str, content_type: str, body: bytes
) -> list[bytes]:
    start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(body)))])
    return [body]


def __getattr__(name: str) -> Any:
    # The clients subclass httpx's and use requests' types: imported only when asked for, so
    # that neither library is needed by a service that only fences.
    if name == "HTTPXAuth":
        from .httpx_auth import HTTPXAuth

        return HTTPXAuth
    if name == "RequestsAuth":
        from .requests_auth import RequestsAuth

        return RequestsAuth
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
