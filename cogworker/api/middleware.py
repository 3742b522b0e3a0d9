"""Client and server middleware chains.

A client middleware is `mw(job, call_next) -> jid | None`: it may change the payload, call
`call_next(job)` to go on to the push, or return None to stop the push (a duplicate unique job).
A server middleware is `mw(job, call_next) -> None` around the job's execution; an exception from
the job passes through it. It may be `async def mw(job, call_next)`, awaiting `call_next()`: around an
`async def` job it then runs on the worker's event loop with the job (api/aio_server.py says how
each kind runs around each kind of job).

A feature that takes something for a job in the client chain (a unique claim, a "queued" status)
also adds an abandon hook: push_bulk calls the hooks with the jobs that went through the chain but
weren't written, so each feature gives back what it took. A push whose outcome is unknown raises
PushOutcomeUnknown through the chain: a middleware keeps what it took then (api/push_outcome.py).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Generic, TypeVar

M = TypeVar("M")

ClientNext = Callable[[dict[str, Any]], Any]
ClientMiddleware = Callable[[dict[str, Any], ClientNext], Any]
ServerNext = Callable[[], None]
ServerMiddleware = Callable[[dict[str, Any], ServerNext], None]


class Chain(Generic[M]):
    """An ordered list of middleware; the first added runs outermost.

    `cogworker.client_chain` runs around every push: a middleware is `mw(job, call_next)` that may
    change the payload, call `call_next(job)` to go on (returning its jid), or return None to stop
    the push. `cogworker.server_chain` runs around every job a worker (or a testing mode) runs:
    `mw(job, call_next)` calls `call_next()` to run the job; the job's exception passes through it.
    The built-in middleware (unique jobs, statuses, expiry) runs outside yours.

    Example:
        ```python
        def tag(job: dict, call_next):
            job["tenant"] = current_tenant()
            return call_next(job)

        cogworker.client_chain.add(tag)
        ```
    """

    def __init__(self) -> None:
        self.entries: list[M] = []

    def add(self, middleware: M) -> None:
        """Add a middleware innermost (after everything added before); adding it again changes nothing.

        Args:
            middleware: The middleware function.
        """
        if middleware not in self.entries:
            self.entries.append(middleware)

    def add_outermost(self, *middleware: M) -> None:
        """Put middleware first, in the order given, ahead of anything added before.

        Args:
            *middleware: The middleware functions; one already in the chain moves.
        """
        rest = [m for m in self.entries if m not in middleware]
        self.entries[:] = [*middleware, *rest]

    def remove(self, middleware: M) -> None:
        """Take a middleware out of the chain; one not in it is ignored.

        Args:
            middleware: The middleware function.
        """
        if middleware in self.entries:
            self.entries.remove(middleware)

    def __len__(self) -> int:
        return len(self.entries)


client_chain: Chain[ClientMiddleware] = Chain()
server_chain: Chain[ServerMiddleware] = Chain()

AbandonHook = Callable[[list[dict[str, Any]]], None]
abandon_hooks: list[AbandonHook] = []


def add_abandon_hook(hook: AbandonHook) -> None:
    if hook not in abandon_hooks:
        abandon_hooks.append(hook)


def abandon(batch: list[dict[str, Any]]) -> None:
    """Give back what the client chain took for jobs that were never written."""
    for hook in abandon_hooks:
        hook(batch)


# Called with jobs that passed the client chain, just before they are written to Redis; returns how to
# undo what it did for the jobs (given to the undo) that turn out not to be written: only those, as a
# write whose reply was lost may have written them (api/push_outcome.py). Batches (api/batch.py)
# register their members this way, so a member is counted before it can run. No hook: a push pays
# one truth test.
Undo = Callable[[list[dict[str, Any]]], None]
BeforeWriteHook = Callable[[list[dict[str, Any]]], Undo | None]
before_write_hooks: list[BeforeWriteHook] = []


def add_before_write_hook(hook: BeforeWriteHook) -> None:
    if hook not in before_write_hooks:
        before_write_hooks.append(hook)


def before_write(jobs: list[dict[str, Any]]) -> Undo:
    """Run the before-write hooks; returns one undo for all of them."""
    undos = [undo for hook in before_write_hooks if (undo := hook(jobs)) is not None]

    def undo_all(unwritten: list[dict[str, Any]]) -> None:
        for undo in reversed(undos):
            undo(unwritten)

    return undo_all


def run_client_chain(job: dict[str, Any], push: ClientNext) -> Any:
    return compose_client_chain(push)(job)


def compose_client_chain(push: ClientNext) -> ClientNext:
    """The client chain as one callable that ends in `push`. push_bulk builds it once per batch,
    so each job costs one call per middleware, not a closure per step."""
    call = push
    for middleware in reversed(client_chain.entries):
        call = _link(middleware, call)
    return call


def _link(middleware: ClientMiddleware, call_next: ClientNext) -> ClientNext:
    return lambda job: middleware(job, call_next)


def run_server_chain(job: dict[str, Any], perform: ServerNext) -> None:
    """The server chain around `perform`, on this thread. An async middleware (api/aio_server.py)
    is run to completion here, on a private loop, its `call_next()` running the rest of the chain."""
    entries = server_chain.entries
    if not entries:
        perform()
        return

    def step(index: int) -> None:
        if index == len(entries):
            perform()
            return
        entry = entries[index]
        if not inspect.iscoroutinefunction(entry) and not inspect.iscoroutinefunction(
            getattr(entry, "__call__", None)  # noqa: B004 - a callable object's own method
        ):
            entry(job, lambda: step(index + 1))
            return

        async def call_next() -> None:
            step(index + 1)

        from cogworker.api.async_jobs import run_to_completion

        run_to_completion(entry(job, call_next))  # type: ignore[arg-type]

    step(0)
