"""A follower that observes the election of a chaos run and records every leader it is told of
(``observe``: woken by the store), so the checkers can tell whether any term was missed."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import anyio

import tenure

from .checkers import OBSERVER
from .history import Recorder


class Observer:
    """Runs ``observe`` on an event loop of its own thread; subscribed when the constructor
    returns (so before any worker starts), stopped by ``close``."""

    def __init__(self, store_url: str, name: str, history: Path) -> None:
        self._recorder = Recorder(history, OBSERVER)
        self._scope: anyio.CancelScope | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        ready = threading.Event()
        failed: list[BaseException] = []

        def main() -> None:
            try:
                anyio.run(self._observe, store_url, name, ready)
            except BaseException as exc:  # reported to the constructor if it never got ready
                failed.append(exc)
                ready.set()

        self._thread = threading.Thread(target=main, name="chaos-observer", daemon=True)
        self._thread.start()
        ready.wait()
        if failed:
            raise failed[0]

    async def _observe(self, store_url: str, name: str, ready: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._scope = anyio.CancelScope()
        async with tenure.connect_async(store_url, label="chaos observer") as client:
            changes = client.observe(name)
            with self._scope:
                await changes.__anext__()  # subscribed, and the current state read
                ready.set()
                async for leader in changes:
                    if leader is not None:
                        self._recorder.record(
                            "observe", "info", token=leader.term, value={"value": leader.value}
                        )

    def close(self) -> None:
        if self._loop is not None and self._scope is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._scope.cancel)
        self._thread.join(10)
        self._recorder.close()
