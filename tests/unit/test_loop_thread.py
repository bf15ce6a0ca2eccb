"""The sync API's loop thread: an interrupt (Ctrl-C) cancels the call it interrupts, even when it
comes before the call's task has begun (the task is then cancelled from its start, instead of
running on, never to end, while the interrupted thread waits for it)."""

from __future__ import annotations

import os
import signal
import threading
import time

import anyio
import pytest

from tenure._loop_thread import LoopThread


@pytest.mark.timeout(20)
def test_an_interrupt_before_the_task_begins_still_cancels_it() -> None:
    loop = LoopThread("test")
    try:
        busy = threading.Thread(target=loop.call_sync, args=(time.sleep, 1.0))
        busy.start()  # the loop runs nothing else for a second: the next task cannot begin
        time.sleep(0.2)
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()  # a real Ctrl-C
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            loop.call(anyio.sleep_forever)
        assert time.monotonic() - started < 5
        busy.join()
    finally:
        loop.close()
