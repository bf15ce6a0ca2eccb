"""A follower that observes the election of a chaos run and records every leader it is told of
(``observe``: woken by the store), so the checkers can tell whether any term was missed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio

import tenure

from .._loop_thread import LoopThread
from .checks import OBSERVER
from .history import Recorder


class Observer:
    """Runs ``observe`` on an event loop of its own thread; subscribed when the constructor
    returns (so before any worker starts), stopped by ``close``."""

    def __init__(self, store_url: str, name: str, history: Path) -> None:
        self._recorder = Recorder(history, OBSERVER)
        self._thread = LoopThread("chaos-observer")
        try:
            client = self._thread.enter(tenure.connect_async(store_url, label="chaos observer"))
            changes = client.election(name).observe()
            self._thread.call(changes.__anext__)  # subscribed, and the current state read
        except BaseException:
            self._thread.close()
            self._recorder.close()
            raise
        self._thread.spawn(self._record, changes)

    async def _record(self, changes: AsyncIterator[tenure.Leader | None]) -> None:
        try:
            async for leader in changes:
                if leader is not None:
                    self._recorder.record(
                        "observe", "info", token=leader.term, value={"value": leader.value}
                    )
        finally:
            with anyio.CancelScope(shield=True):
                await changes.aclose()  # type: ignore[attr-defined]  # an async generator

    def close(self) -> None:
        self._thread.close()
        self._recorder.close()
