"""A fenced HTTP service and two holders of one lock: the old holder's late write is refused.

    python examples/fenced_http.py      # needs starlette, uvicorn and httpx (or requests)

The service (Starlette on uvicorn, on a free loopback port) keeps its stock in SQLite. Its
middleware admits each request's token in a keeper on the service's own database, and the
endpoint admits it again in the transaction of its write: the strongest form
(docs/fencing-http.md). Holder A writes, then B is granted the lock and writes; A's late write,
with its old token, is refused with 409, which A's client raises as ``tenure.StaleToken``.
"""

from __future__ import annotations

import socket
import sqlite3
import tempfile
import threading
import time
from pathlib import Path

import httpx
import requests
import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

import tenure
from tenure.fence import (
    ASGIFence,
    HTTPXAuth,
    RequestsAuth,
    SQLFence,
    SQLKeeper,
    admission,
    stale_body,
)


def stock_service(db_path: Path) -> ASGIFence:
    fence = SQLFence()  # the table of the highest token per resource, in the service's database

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(db_path, isolation_level=None)

    def restock(resource: str, token: int, count: int) -> None:
        db = connect()
        try:
            with fence.fenced(db, resource, token) as cur:  # admit and write: one transaction
                cur.execute("UPDATE stock SET count = ?", (count,))
        finally:
            db.close()

    async def post_stock(request: Request) -> Response:
        admitted = admission(request.scope)  # what the middleware admitted
        assert admitted is not None  # POST must carry a token
        count = int(await request.body())
        await run_in_threadpool(restock, admitted.resource, admitted.token, count)
        return PlainTextResponse("restocked\n")

    async def refuse(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, tenure.StaleToken)
        return JSONResponse(stale_body(exc), 409)  # the body the clients turn into StaleToken

    app = Starlette(
        routes=[Route("/stock", post_stock, methods=["POST"])],
        exception_handlers={tenure.StaleToken: refuse},
    )
    return ASGIFence(app, keeper=SQLKeeper(connect, fence), resource="stock")


def serve(app: ASGIFence) -> tuple[str, uvicorn.Server]:
    """``app`` on uvicorn in a thread, on a free loopback port; its URL once it is up."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db_path = Path(tmp) / "service.db"
        with sqlite3.connect(db_path, isolation_level=None) as db:
            db.execute("CREATE TABLE stock (count INTEGER)")
            db.execute("INSERT INTO stock VALUES (0)")
            SQLFence().ensure_table(db)
        url, server = serve(stock_service(db_path))
        store = f"sqlite:///{tmp}/locks.db"

        with tenure.connect(store) as a, tenure.connect(store) as b:
            lease_a = a.lock("stock", ttl=30).acquire()
            holder_a = httpx.Client(base_url=url, auth=HTTPXAuth(lease_a))
            holder_a.post("/stock", content="10").raise_for_status()
            print(f"A (token {lease_a.token}) restocked to 10")
            lease_a.release()  # A is done, or paused past its lease: B is granted the lock

            with b.lock("stock", ttl=30) as lease_b:
                auth_b = RequestsAuth(lease_b)
                requests.post(f"{url}/stock", data="20", auth=auth_b).raise_for_status()
                print(f"B (token {lease_b.token}) restocked to 20")
                try:
                    holder_a.post("/stock", content="5")  # A wakes up and writes, too late
                except tenure.StaleToken as exc:
                    print(f"A refused: {exc}")
            holder_a.close()

        with sqlite3.connect(db_path) as db:
            print(f"stock: {db.execute('SELECT count FROM stock').fetchone()[0]}")
        server.should_exit = True


if __name__ == "__main__":
    main()
