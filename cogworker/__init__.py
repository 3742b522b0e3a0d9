"""cogworker: Redis-backed background jobs, run as a supervised swarm with reliable fetch."""

from __future__ import annotations

from cogworker.client import configure, push_bulk
from cogworker.jobs import JobFunction, JobNotFound, job
from cogworker.middleware import client_chain, server_chain
from cogworker.settings import ConfigError, Settings, load_settings

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "JobFunction",
    "JobNotFound",
    "Settings",
    "__version__",
    "client_chain",
    "configure",
    "job",
    "load_settings",
    "push_bulk",
    "server_chain",
]
