"""The bridge pool: daemon threads that run sync calls for the event loop, and hand back their
outcome as an asyncio future (sync server middleware around an async job, a job with a rate limiter).

Not a `concurrent.futures.ThreadPoolExecutor`, for two reasons. Its threads are joined when the
interpreter exits, and a stop may leave some waiting for good (a job given up on at the stop's
deadline, or stuck past its time limit): the process would never exit. And its size is fixed, while
a call here may wait for the loop to run another that needs a thread of its own (nested runs of sync
middleware): a pool with every thread so waiting would deadlock. So a thread is started whenever no
thread is idle, and kept for the next call; at most one per call in flight, which the async slots
bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any

Call = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[[], Any]]


class BridgePool:
    def __init__(self, name: str) -> None:
        self._name = name
        self._calls: queue.SimpleQueue[Call | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._threads = 0

    @property
    def threads(self) -> int:
        return self._threads

    def submit(self, call: Callable[[], Any]) -> asyncio.Future[Any]:
        """On the loop: run `call()` on a pool thread; its future is resolved on the loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            start = self._idle == 0
            if start:
                self._threads += 1
            else:
                self._idle -= 1
            number = self._threads
        self._calls.put((loop, future, call))
        if start:
            threading.Thread(target=self._work, name=f"{self._name}-{number}", daemon=True).start()
        return future

    def _work(self) -> None:
        while True:
            item = self._calls.get()
            if item is None:
                return
            loop, future, call = item
            try:
                outcome: tuple[Any, BaseException | None] = (call(), None)
            except BaseException as exc:  # the call's own failure, raised in the awaiting task
                outcome = (None, exc)
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody awaits it any more
                loop.call_soon_threadsafe(_resolve, future, outcome)
            del item, future, outcome  # no reference to an exception kept while idle
            with self._lock:
                self._idle += 1

    def close(self) -> None:
        """Let every idle thread end (a thread still in a call ends after it)."""
        with self._lock:
            threads = self._threads
        for _ in range(threads):
            self._calls.put(None)


def _resolve(future: asyncio.Future[Any], outcome: tuple[Any, BaseException | None]) -> None:
    if future.cancelled():
        return
    value, error = outcome
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
