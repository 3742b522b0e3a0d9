"""The Lua scripts in `lua/`, registered with redis-py (which retries NOSCRIPT with the full text).

A script is loaded with the helpers of `lua/prelude.lua` it calls in front of its own text
(`source`), so its SHA covers them: a changed helper makes a new script, never one Redis runs under
an old SHA. Only the helpers it calls are put there, not the whole prelude: the limiter scripts run
on a job's own round trip, and each helper is a closure every run of the script makes again.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from cogworker.store.direct_connection import DirectConnection

_NAMES = (
    "fetch",
    "reconcile",
    "settle",
    "give_back",
    "requeue",
    "swap_dead",
    "graduate",
    "graduate_batch",
    "bury",
    "heartbeat",
    "owned_delete",
    "file_unsettled",
    "handover",
    "periodic",
    "locate",
    "cancel",
    "metrics_flush",
)


_HELPER = re.compile(r"^local function (\w+)\(", re.MULTILINE)


@cache
def body(name: str) -> str:
    """The text of `lua/<name>.lua` as it is in the file."""
    return resources.files("cogworker.store").joinpath(f"lua/{name}.lua").read_text()


@cache
def helpers() -> dict[str, str]:
    """The prelude's helpers by name, each its block of text (comment and function), in file order."""
    found: dict[str, str] = {}
    # The first block is the file's own comment; each later one defines one helper.
    for block in body("prelude").strip().split("\n\n")[1:]:
        names = _HELPER.findall(block)
        if len(names) != 1:
            raise ValueError(f"prelude.lua: a block must define one helper, not {names}: {block[:80]!r}")
        found[names[0]] = block
    return found


def _called(text: str) -> set[str]:
    return {name for name in helpers() if re.search(rf"\b{name}\b", text)}


def with_prelude(text: str) -> str:
    """`text` after the prelude's helpers it calls, and those they call, in the prelude's order."""
    needed = _called(text)
    while True:
        more = set().union(*(_called(helpers()[name]) for name in needed)) - needed
        if not more:
            break
        needed |= more
    blocks = [block for name, block in helpers().items() if name in needed]
    return "\n\n".join([*blocks, text]) if blocks else text


# Scripts loaded with another file's functions in front of their own: requeue.lua counts a batch
# member cancelled while its process died in its batch (batch_lib.lua's batch_run) in the step that
# drops it, so the member can't be left pending by a crash between the two.
_LIBRARIES = {"requeue": ("batch_lib",)}


@cache
def source(name: str) -> str:
    """The text script `name` is loaded with: its file's text (after the files it uses) after the
    helpers it calls."""
    return with_prelude("\n".join([*(body(lib) for lib in _LIBRARIES.get(name, ())), body(name)]))


def load_all() -> None:
    """Read and assemble every script's text now (each is cached): a process that forks workers does
    it once, before the fork, instead of each worker on the way to its first fetch."""
    for name in _NAMES:
        source(name)


class ClientScript:
    """One script registered with whichever client last asked for it (redis-py reloads it after
    NOSCRIPT). For code that runs a script on a client it is handed rather than one it owns: the job
    API's pushes and the chain's ack; registering again only when the client changes keeps the hot
    path to one identity check."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._cached: tuple[redis.Redis, Script] | None = None

    def on(self, conn: redis.Redis) -> Script:
        cached = self._cached
        if cached is None or cached[0] is not conn:
            cached = (conn, conn.register_script(source(self.name)))
            self._cached = cached
        return cached[1]


class Scripts:
    """Every script bound to one client; pass `client=` a pipeline to batch calls."""

    def __init__(self, client: redis.Redis) -> None:
        self._scripts: dict[str, Script] = {n: client.register_script(source(n)) for n in _NAMES}

    def run(self, name: str, keys: list[str], args: list[Any], client: Any = None) -> Any:
        return self._scripts[name](keys=keys, args=args, client=client)

    def run_direct(self, conn: DirectConnection, name: str, keys: list[str], args: list[Any]) -> Any:
        """`run` on a connection the calling thread owns (the fetch loop's)."""
        script = self._scripts[name]
        try:
            return conn.call("EVALSHA", script.sha, len(keys), *keys, *args)
        except NoScriptError:
            # Redis restarted or its script cache was flushed; EVAL caches the script again.
            return conn.call("EVAL", script.script, len(keys), *keys, *args)

    def run_direct_then(
        self, conn: DirectConnection, name: str, keys: list[str], args: list[Any], then: tuple[Any, ...]
    ) -> tuple[Any, Any]:
        """`run_direct`, with the command `then` (a WAIT) in the same write; both replies. The
        script's error is raised; `then`'s comes back as its reply."""
        script = self._scripts[name]
        reply, after = conn.call_many(("EVALSHA", script.sha, len(keys), *keys, *args), then)
        if isinstance(reply, NoScriptError):
            reply, after = conn.call_many(("EVAL", script.script, len(keys), *keys, *args), then)
        if isinstance(reply, Exception):
            raise reply
        return reply, after
