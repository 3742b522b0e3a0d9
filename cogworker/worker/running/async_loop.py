"""The worker's event loop for `async def` jobs: one loop, in its own thread, per worker process.

An async job runs on the loop from its start to its end: decoding, the server middleware chain,
its body and its settling are one task (worker/running/async_process.py), so its slot is free, and
filled again from the jobs waiting, the moment it ends. Its body runs as a task of its own
(`run_here`), in a copy of the job task's context, so it sees the job's structlog values (jid, job,
queue) and whatever contextvars the middleware set. Sync server middleware and sync Redis work (a
filing, a unique release) run on threads while the task awaits them: the bridge pool (`run_sync`)
and asyncio's default executor (api/aio_server.py). A job with a rate limiter still runs on a bridge
thread as a sync job does, only its body handed to the loop (`run`), as every async job once did.

`cogworker.cancel(jid)` of a running async job cancels its body's task (through the job's CurrentJob,
api/current_job.py), which then ends with JobCancelled: the job ends as cancelled.

A stop cancels the body tasks still running at its deadline (`cancel_all`): their jobs' tasks never
go on (like a sync job's thread still busy then), so nothing is settled or released and the stop's
requeue puts their jobs back on their queues.

A watchdog thread schedules a callback on the loop every half threshold; when it doesn't run within
`COGWORKER_ASYNC_LAG_THRESHOLD_S`, something blocks the loop (a sync call inside `async def`) and
stalls every async job of the process: `async_loop_blocked` is logged once per stall with the job
running on the loop and the loop thread's stack, and `async_loop_unblocked` when it ends.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
import threading
import time
import traceback
from collections.abc import Callable, Coroutine
from typing import Any

import structlog

from cogworker.api.current_job import JobCancelled, running_job
from cogworker.worker.running.bridge_pool import BridgePool

log = structlog.get_logger("cogworker.async")

# How long a stop lets cancelled tasks run their `finally` blocks before it requeues their jobs.
CANCEL_GRACE_S = 1.0


class AsyncLoop:
    def __init__(self, lag_threshold_s: float) -> None:
        self._threshold = lag_threshold_s
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        # Every job task on the loop, with the fields that name its job (touched on the loop only;
        # the watchdog reads one entry).
        self._tasks: dict[asyncio.Task[Any], dict[str, str]] = {}
        # The job tasks whose body runs in them now (`run_here`), each with what says it has ended.
        self._unwound: dict[asyncio.Task[Any], asyncio.Future[None]] = {}
        self._abandoning = False
        self._closing = threading.Event()
        # The bridge pool: sync middleware around async jobs, and jobs carried by a thread (`run`).
        self._bridge = BridgePool("async-bridge")

    @property
    def running_tasks(self) -> int:
        return len(self._tasks)

    def _ensure_started(self) -> asyncio.AbstractEventLoop:
        """The loop starts with the first async job: a process that runs none has no loop thread."""
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()
                self._thread = threading.Thread(
                    target=self._run_loop, args=(loop, ready), name="async-loop", daemon=True
                )
                self._thread.start()
                ready.wait()
                threading.Thread(target=self._watch, args=(loop,), name="async-watchdog", daemon=True).start()
                self._loop = loop
            return self._loop

    @staticmethod
    def _run_loop(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        loop.run_forever()

    def call_soon(self, callback: Callable[..., object], *args: Any) -> None:
        """Run `callback(*args)` on the loop (started if need be), from any thread."""
        self._ensure_started().call_soon_threadsafe(callback, *args)

    def start_task(self, coro: Coroutine[Any, Any, Any]) -> None:
        """On the loop: run a job's task, in a context of its own (as a new thread's is: empty), so
        nothing one job binds or sets is seen by the next."""
        asyncio.get_running_loop().create_task(coro, context=contextvars.Context())

    async def run_sync(self, call: Callable[[], Any]) -> Any:
        """On the loop: `call()` on a bridge thread (bridge_pool.py), in the calling task's context,
        awaited."""
        context = contextvars.copy_context()
        return await self._bridge.submit(lambda: context.run(call))

    async def run_here(self, coro: Coroutine[Any, Any, Any], job: dict[str, Any], queue: str) -> Any:
        """On the loop, in a job's task: await its body `coro` in that task. While the body runs, a
        cancel (`cogworker.cancel`) or a stop (`cancel_all`) cancels the task, and the cancellation is
        caught here as the body ends: the job ends with JobCancelled, or, given up on by a stop, its
        task waits for good. A cancel arriving outside the body does nothing to the task (before it,
        the job's start check raised JobCancelled; after it, the job has ended). Returns the body's
        result or raises its exception."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        label = {"job": str(job.get("class")), "jid": str(job.get("jid") or ""), "queue": queue}
        unwound: asyncio.Future[None] = loop.create_future()
        self._tasks[task] = label
        self._unwound[task] = unwound
        current = running_job()  # cogworker.cancel: cancelling the job cancels its body

        def cancel_body() -> None:
            if self._unwound.get(task) is unwound:  # only while this body runs
                task.cancel()

        if current is not None:
            current.on_cancel(lambda: loop.call_soon_threadsafe(cancel_body))
        try:
            value = await coro
        except GeneratorExit:  # this job's task destroyed unfinished (the process is ending)
            raise
        except BaseException as exc:
            self._body_ended(task, unwound)
            if self._abandoning:
                await loop.create_future()  # given up on by a stop: see `run`
            if task.cancelling():  # ours: the task goes on, into the chain, as the job's end
                while task.cancelling():
                    task.uncancel()
                if isinstance(exc, asyncio.CancelledError) and current is not None and current.cancelled:
                    raise JobCancelled(current.jid) from None
            raise
        self._body_ended(task, unwound)
        if self._abandoning:
            await loop.create_future()
        while task.cancelling():  # a cancel the body caught and returned from: the job succeeded
            task.uncancel()
        return value

    def _body_ended(self, task: asyncio.Task[Any], unwound: asyncio.Future[None]) -> None:
        self._tasks.pop(task, None)
        self._unwound.pop(task, None)
        unwound.set_result(None)

    def run(self, coro: Coroutine[Any, Any, Any], job: dict[str, Any], queue: str) -> Any:
        """On a bridge thread (a job with a rate limiter): run `coro` as a task on the loop, in a copy
        of this thread's context, and wait for it. Returns its result or raises its exception; never
        returns for a task a stop cancelled (`cancel_all`)."""
        try:
            loop = self._ensure_started()
        except BaseException:
            coro.close()
            raise
        context = contextvars.copy_context()
        label = {"job": str(job.get("class")), "jid": str(job.get("jid") or ""), "queue": queue}
        done = threading.Event()
        started: list[asyncio.Task[Any]] = []
        current = running_job()  # cogworker.cancel: cancelling the job cancels its task

        def start() -> None:
            task = loop.create_task(coro, name=f"{label['job']} {label['jid']}", context=context)
            self._tasks[task] = label
            task.add_done_callback(self._finished)
            task.add_done_callback(lambda _task: done.set())
            started.append(task)
            if current is not None:
                current.on_cancel(lambda: loop.call_soon_threadsafe(task.cancel))

        try:
            loop.call_soon_threadsafe(start)
        except RuntimeError:  # the loop is closed (a job handed over after a stop): never run
            coro.close()
            raise
        done.wait()
        if self._abandoning:
            # A stop gave up on it: like a sync job's thread still busy at the deadline, its thread
            # never returns into the middleware (no status, no unique release, no settle); the stop's
            # requeue puts the job back. The thread is a daemon and ends with the process.
            threading.Event().wait()
        if started[0].cancelled() and current is not None and current.cancelled:
            raise JobCancelled(current.jid)  # not a failure: the job was cancelled (cogworker.cancel)
        return started[0].result()

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.pop(task, None)

    def cancel_all(self, grace_s: float = CANCEL_GRACE_S) -> int:
        """At a stop's deadline: cancel every running body and give them `grace_s` to unwind. Their
        jobs never go on (see `run_here`, `run`). Returns how many were cancelled."""
        self._abandoning = True
        loop = self._loop
        if loop is None:
            return 0

        async def cancel_and_wait() -> int:
            tasks = list(self._tasks)
            # A body run in its job's task ends when that task's entry says so (the task itself
            # then waits for good); a body carried by a thread (`run`) is its own task.
            ends = [self._unwound.get(task, task) for task in tasks]
            for task in tasks:
                task.cancel()
            if ends:
                await asyncio.wait(ends, timeout=grace_s)
            return len(tasks)

        future = asyncio.run_coroutine_threadsafe(cancel_and_wait(), loop)
        try:
            return future.result(timeout=grace_s + 1.0)
        except Exception:  # the loop is blocked: its jobs are requeued all the same
            future.cancel()
            return len(self._tasks)

    def close(self) -> None:
        """Stop the loop (after every async job ended) and its watchdog."""
        self._closing.set()
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or self._abandoning:
            return  # abandoned tasks keep the loop; the process is about to exit
        self._bridge.close()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5.0)
        if not thread.is_alive():
            loop.close()

    # The watchdog ----------------------------------------------------------------------------
    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        interval = self._threshold / 2
        while not self._closing.wait(interval):
            pong = threading.Event()
            sent = time.monotonic()
            try:
                loop.call_soon_threadsafe(pong.set)
            except RuntimeError:  # the loop is closed
                return
            if pong.wait(self._threshold):
                continue
            self._report_stall(loop, time.monotonic() - sent)
            while not pong.wait(interval):
                if self._closing.is_set():
                    return
            log.warning("async_loop_unblocked", blocked_s=round(time.monotonic() - sent, 3))

    def _report_stall(self, loop: asyncio.AbstractEventLoop, lag_s: float) -> None:
        thread = self._thread
        frame = sys._current_frames().get(thread.ident) if thread is not None and thread.ident else None
        stack = "".join(traceback.format_stack(frame)) if frame is not None else ""
        # Read from this thread: the task the loop is running now, the one that blocks it.
        task = asyncio.current_task(loop)
        label = self._tasks.get(task, {}) if task is not None else {}
        log.warning(
            "async_loop_blocked",
            lag_s=round(lag_s, 3),
            threshold_s=self._threshold,
            job=label.get("job"),
            jid=label.get("jid"),
            queue=label.get("queue"),
            stack=stack,
            note="a sync call inside `async def` stalls every async job of this process; "
            "await it, or run it with asyncio.to_thread",
        )
