"""Real HTTP servers for fenced apps, in this process on free loopback ports: uvicorn (ASGI)
and waitress (WSGI), each in a thread; and the two small apps they serve.

Both apps answer ``/orders`` (any method; the path's tail, if any, is the order) with "written"
and record the `Admission` they were handed; ``/conflict`` answers the app's own 409."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import flask
import uvicorn
import waitress
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from waitress import wasyncore

from tenure.fence import Admission, admission

READY_TIMEOUT = 30.0  # a guard against a hang, not a measure
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


def starlette_app(seen: list[Admission | None]) -> Starlette:
    async def orders(request: Request) -> Response:
        seen.append(admission(request.scope))
        return PlainTextResponse("written\n")

    async def conflict(request: Request) -> Response:
        return JSONResponse({"error": "out of stock"}, 409)

    return Starlette(
        routes=[
            Route("/orders", orders, methods=METHODS),
            Route("/orders/{order}", orders, methods=METHODS),
            Route("/conflict", conflict, methods=["POST"]),
        ]
    )


def flask_app(seen: list[Admission | None]) -> flask.Flask:
    app = flask.Flask("fenced")

    @app.route("/orders", methods=METHODS)
    @app.route("/orders/<order>", methods=METHODS)
    def orders(order: str = "") -> str:
        seen.append(admission(flask.request.environ))
        return "written\n"

    @app.route("/conflict", methods=["POST"])
    def conflict() -> tuple[dict[str, str], int]:
        return {"error": "out of stock"}, 409

    return app


@contextmanager
def uvicorn_serving(app: Any) -> Iterator[str]:
    """``app`` on a real uvicorn server; yields its URL once it accepts connections."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        for _ in range(int(READY_TIMEOUT / 0.01)):
            if server.started or not thread.is_alive():
                break
            time.sleep(0.01)
        assert server.started, "uvicorn did not start"
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(READY_TIMEOUT)
        sock.close()


@contextmanager
def waitress_serving(app: Any) -> Iterator[str]:
    """``app`` on a real waitress server (listening once created); yields its URL."""
    server = waitress.create_server(app, host="127.0.0.1", port=0, threads=8)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.effective_port}"
    finally:
        # The worker threads first: a request finishing pulls the trigger (waitress's
        # channel.service), which fails with EBADF once close_all has closed it (seen once).
        server.task_dispatcher.shutdown()
        # Every channel (kept-alive connections too) closed from the server's own loop thread,
        # where its trigger runs the call: the loop ends when its map is empty. (WebTest's
        # StopableWSGIServer stops waitress the same way; a one-socket server's close() only
        # stops listening.)
        server.trigger.pull_trigger(lambda: wasyncore.close_all(server._map))
        thread.join(READY_TIMEOUT)
        assert not thread.is_alive(), "waitress did not stop"
