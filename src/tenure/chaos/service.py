"""The ``http`` workload's service: the chaos resource behind a real HTTP API, as a real lock
usually protects a service, not a file. A Starlette app on uvicorn, in a process of its own
(``python -m tenure.chaos.service --resource PATH --port N [--unfenced]``), started and stopped
by the runner (`Service`).

``GET /counter`` answers the counter; ``PUT /counter`` with ``{"value": v, "data": {...}}``
sets it and logs the write (the resource's ``accepted`` table, with the writer's process from
the ``Chaos-Process`` header and its token). Fenced (the default), `tenure.fence.http.ASGIFence`
stands in front of every request, reads included (``methods="*"``), and admits its token in an
`SQLKeeper` on the resource's own database before the app sees it: a stale token is a 409, which
the workers' `HTTPXAuth` turns into ``StaleToken``. Unfenced, there is no middleware and the
workers send no token: the service trusts the lock alone.
"""

from __future__ import annotations

import argparse
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from .._errors import StoreUnavailable
from .resource import RESOURCE, Resource

PROCESS_HEADER = "Chaos-Process"
READY_TIMEOUT = 30.0


def make_app(resource: Path | str, fenced: bool) -> Any:
    """The service's ASGI app (fenced: behind the HTTP fence)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    from ..fence import SQLFence
    from ..fence.http import ASGIFence, admission
    from ..fence.keepers import SQLKeeper

    def token_of(request: Request) -> int:
        admitted = admission(request.scope)
        return admitted.token if admitted is not None else 0

    def writer(request: Request) -> Resource:
        # The fence is the middleware's: the app reads and writes plainly.
        return Resource(resource, request.headers.get(PROCESS_HEADER, "?"), fenced=False)

    def read(request: Request) -> Response:
        db = writer(request)
        try:
            return JSONResponse(db.read(token_of(request)))
        finally:
            db.close()

    async def write(request: Request) -> Response:
        body = await request.json()
        db = writer(request)
        try:
            db.write(token_of(request), body["value"], body["data"])
        finally:
            db.close()
        return Response(status_code=204)

    app: Any = Starlette(
        routes=[
            Route("/counter", read, methods=["GET"]),
            Route("/counter", write, methods=["PUT"]),
        ]
    )
    if fenced:

        def connect() -> sqlite3.Connection:
            return sqlite3.connect(resource, isolation_level=None, timeout=60)

        keeper = SQLKeeper(connect, SQLFence())
        app = ASGIFence(app, keeper, resource=RESOURCE, methods="*")
    return app


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Service:
    """The service's process: started, waited for, stopped (a context manager)."""

    def __init__(self, resource: Path, fenced: bool, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [
            sys.executable, "-m", "tenure.chaos.service", "--resource", str(resource),
            "--port", str(self.port),
        ]  # fmt: skip
        if not fenced:
            argv.append("--unfenced")
        with log.open("ab") as out:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        self._wait_ready()

    def _wait_ready(self) -> None:
        until = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < until:
            if self.proc.poll() is not None:
                break
            try:
                httpx.get(f"{self.url}/counter", timeout=1.0)  # any answer: it is serving
                return
            except httpx.TransportError:
                time.sleep(0.05)
        self.close()
        raise StoreUnavailable(f"the chaos service did not start on {self.url}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m tenure.chaos.service")
    parser.add_argument("--resource", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--unfenced", action="store_true")
    args = parser.parse_args(argv)
    app = make_app(args.resource, fenced=not args.unfenced)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
