"""cogworker: Redis-backed background jobs, run as a supervised swarm with reliable fetch."""

from __future__ import annotations

from cogworker.client import configure, push_bulk
from cogworker.jobs import JobFunction, JobNotFound, job
from cogworker.middleware import client_chain, server_chain
from cogworker.periodic import periodic
from cogworker.settings import ConfigError, Settings, load_settings
from cogworker.status import status

__version__ = "0.1.0"


def install_builtin_middleware() -> None:
    """Put the built-in middleware (unique claims, job status) in the chains, outermost.

    Done once at import. Your own middleware, added later, runs inside them: a unique job's duplicate
    never reaches it, and its "queued" status is written before it. Call this again after clearing
    the chains (tests do) to restore them.
    """
    from cogworker.status import on_push, on_run
    from cogworker.unique import claim, release_when_done

    for client_mw in (claim, on_push):
        client_chain.add(client_mw)
    for server_mw in (on_run, release_when_done):
        server_chain.add(server_mw)


install_builtin_middleware()

__all__ = [
    "ConfigError",
    "JobFunction",
    "JobNotFound",
    "Settings",
    "__version__",
    "client_chain",
    "configure",
    "install_builtin_middleware",
    "job",
    "load_settings",
    "periodic",
    "push_bulk",
    "server_chain",
    "status",
]
