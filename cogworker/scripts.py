"""The Lua scripts in `lua/`, registered with redis-py (which retries NOSCRIPT with the full text)."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import redis
from redis.commands.core import Script

_NAMES = (
    "fetch",
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
)


@cache
def source(name: str) -> str:
    return resources.files("cogworker").joinpath(f"lua/{name}.lua").read_text()


class Scripts:
    """Every script bound to one client; pass `client=` a pipeline to batch calls."""

    def __init__(self, client: redis.Redis) -> None:
        self._scripts: dict[str, Script] = {n: client.register_script(source(n)) for n in _NAMES}

    def run(self, name: str, keys: list[str], args: list[Any], client: Any = None) -> Any:
        return self._scripts[name](keys=keys, args=args, client=client)
