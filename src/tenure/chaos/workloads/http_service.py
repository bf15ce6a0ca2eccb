"""The ``http`` workload: the counter step through a real HTTP service (`..service`): read the
counter (``GET``), think, write value+1 (``PUT``), each request carrying the lease's token
(`tenure.fence.http.HTTPXAuth`), which the service's fence admits or refuses with a 409 —
``StaleToken`` here. ``--unfenced``: no token is sent and the service has no fence."""

from __future__ import annotations

from typing import TYPE_CHECKING

import tenure

from ..resource import HTTP
from ._base import Workload

if TYPE_CHECKING:
    from ..worker import Worker


def step(worker: Worker, lease: tenure.Lease) -> None:
    import httpx

    from ...fence.http import HTTPXAuth
    from ..service import PROCESS_HEADER

    token, args = lease.token, worker.args
    auth = None if args.unfenced else HTTPXAuth(lease)
    headers = {PROCESS_HEADER: args.process}
    with httpx.Client(base_url=args.service, auth=auth, headers=headers, timeout=10) as http:

        def read() -> int:
            answer = http.get("/counter")
            answer.raise_for_status()
            return int(answer.json())

        value = worker.op("read", token, None, read)
        worker.think()
        data = {"old": value, "new": value + 1}

        def write() -> None:
            http.put("/counter", json={"value": value + 1, "data": data}).raise_for_status()

        worker.op("write", token, data, write, ok=data)


WORKLOAD = Workload(HTTP, step=step)
