"""The ASGI app of ``tenure serve`` (Starlette): the page, its JSON API and its live feed.

Read-only but for one route: ``POST /api/revoke``, the page's revoke button, refused (403)
unless ``tenure serve --allow-revoke`` (`tenure.cli.web.revoke`). Then the page carries a random
token of this server in a meta tag, which the route requires back.

Live updates are server-sent events fed by one reader of the store for every viewer (`Feed`):
the public API has a watch for one name (``election.observe()``), none for every lock, so the
feed reads the store every ``interval`` seconds and pushes a state when it changed. The store's
load is one read per interval whatever the number of viewers, and a viewer learns of a change
within an interval.
"""

from __future__ import annotations

import contextlib
import html
import json
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources

import anyio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

import tenure

from .. import one_line
from .revoke import revoke_endpoint
from .state import State, read_state, settled

FRESH = 5.0
"""Seconds between two pushes at most: the times left, renewed meanwhile, are sent again (the
page counts them down in between)."""
KEEPALIVE = 15.0
"""Seconds of quiet after which an event stream gets a comment (proxies close idle streams)."""
HEALTH_TIMEOUT = 5.0
"""Seconds a /healthz read may take before the store counts as unreachable."""
HEADERS = {
    # The page's own script and style only: nothing inline, nothing from elsewhere.
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
STATIC = {  # path → (file in static/, media type)
    "/": ("index.html", "text/html; charset=utf-8"),
    "/page.js": ("page.js", "text/javascript; charset=utf-8"),
    "/page.css": ("page.css", "text/css; charset=utf-8"),
    "/favicon.svg": ("favicon.svg", "image/svg+xml"),
}


class Feed:
    """One reader of the store for every event stream: reads it every ``interval`` seconds and
    wakes the streams when what they would show changed (or `FRESH` seconds passed)."""

    def __init__(self, client: tenure.AsyncClient, interval: float) -> None:
        self.client = client
        self.interval = interval
        self.version = 0
        self.payload: State = {"error": "not read yet"}
        self.closed = False
        self._changed = anyio.Event()

    async def run(self) -> None:
        """Read and publish until cancelled."""
        last: object = None
        pushed = 0.0
        while True:
            try:
                payload = await read_state(self.client)
            except tenure.TenureError as exc:
                payload = {"error": one_line(str(exc))}
            now = time.monotonic()
            if settled(payload) != last or now - pushed >= FRESH:
                last, pushed = settled(payload), now
                self.payload = payload
                self.version += 1
                self._changed.set()
                self._changed = anyio.Event()
            await anyio.sleep(self.interval)

    async def after(self, seen: int) -> tuple[int, State] | None:
        """The first payload published after version ``seen``, and its version; None once
        closed."""
        while self.version == seen and not self.closed:
            await self._changed.wait()
        return None if self.closed else (self.version, self.payload)

    def close(self) -> None:
        """End every event stream (the server is stopping: it waits for open responses)."""
        self.closed = True
        self._changed.set()


class AsgiEndpoint:
    """An ASGI app as a route's endpoint (Starlette takes a plain function for a request
    handler, and prometheus_client's app is one)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def _static(
    name: str, media_type: str, csrf: str | None
) -> Callable[[Request], Awaitable[Response]]:
    body = resources.files(__package__).joinpath("static").joinpath(name).read_bytes()
    if name == "index.html" and csrf is not None:  # revoke allowed: the page's token
        meta = f'<meta name="tenure-csrf" content="{html.escape(csrf)}">\n</head>'
        body = body.replace(b"</head>", meta.encode(), 1)

    async def serve(request: Request) -> Response:
        return Response(body, media_type=media_type, headers=HEADERS)

    return serve


def make_app(
    client: tenure.AsyncClient,
    interval: float,
    allowed_hosts: list[str] | None,
    allow_revoke: bool = False,
) -> Starlette:
    """The app over an open client; ``allowed_hosts`` (None: any) is what a request's Host
    header may name, so that a page elsewhere cannot read this one by rebinding a DNS name to
    127.0.0.1. ``allow_revoke``: the page's revoke button and its route (else 403)."""
    feed = Feed(client, interval)
    csrf = secrets.token_urlsafe(32) if allow_revoke else None

    async def state(request: Request) -> Response:
        try:
            return JSONResponse(await read_state(client), headers=HEADERS)
        except tenure.TenureError as exc:
            return JSONResponse({"error": one_line(str(exc))}, status_code=503, headers=HEADERS)

    async def events(request: Request) -> Response:
        async def stream() -> AsyncIterator[str]:
            seen = -1
            yield "retry: 2000\n\n"  # reconnect after 2 s if the server goes away
            while True:
                with anyio.move_on_after(KEEPALIVE) as waited:
                    got = await feed.after(seen)
                if waited.cancelled_caught:
                    yield ": still here\n\n"
                elif got is None:
                    return
                else:
                    seen, payload = got
                    yield f"data: {json.dumps(payload)}\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream", headers=HEADERS)

    async def healthz(request: Request) -> Response:
        try:
            with anyio.fail_after(HEALTH_TIMEOUT):
                await client.locks()
        except (tenure.TenureError, TimeoutError) as exc:
            why = one_line(str(exc)) or f"no answer in {HEALTH_TIMEOUT:g}s"
            return PlainTextResponse(f"store unavailable: {why}\n", 503, headers=HEADERS)
        return PlainTextResponse("ok\n", headers=HEADERS)

    routes: list[BaseRoute] = [
        Route("/api/state", state),
        Route("/api/events", events),
        Route("/healthz", healthz),
        Route("/api/revoke", revoke_endpoint(client, csrf, HEADERS), methods=["POST"]),
    ]
    routes += [Route(path, _static(*file, csrf)) for path, file in STATIC.items()]
    with contextlib.suppress(ImportError):  # /metrics only where prometheus_client is
        import prometheus_client

        routes.append(Route("/metrics", AsgiEndpoint(prometheus_client.make_asgi_app())))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(feed.run)
            yield
            tasks.cancel_scope.cancel()

    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts or ["*"])]
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.feed = feed  # closed by the server as it stops (`tenure.cli.serve`)
    return app


__all__ = ["Feed", "make_app"]
