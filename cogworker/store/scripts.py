"""The Lua scripts in `lua/`, registered with redis-py (which retries NOSCRIPT with the full text)."""

from __future__ import annotations

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
    "bury",
    "heartbeat",
    "owned_delete",
    "file_unsettled",
    "handover",
    "periodic",
    "locate",
    "cancel",
)


@cache
def source(name: str) -> str:
    return resources.files("cogworker.store").joinpath(f"lua/{name}.lua").read_text()


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
