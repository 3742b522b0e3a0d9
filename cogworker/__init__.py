"""cogworker: Redis-backed background jobs, run as a supervised swarm with reliable fetch.

Declare a job with `@cogworker.job`, push it with `perform_async` (or `perform_in`, `perform_at`),
and run `cogworker-swarm` to work the queues. Around that: `chain`/`group` and `batch` to compose
jobs, `result` and `status` to follow one, `cancel` to stop one, `periodic` for cron schedules,
`limiter` for rate limits, `on_death` for jobs that fail for good, `push_named` and `ruby_job` to
push jobs that Ruby's Sidekiq runs, and the middleware chains
(`client_chain`, `server_chain`). `cogworker.testing` runs jobs in memory in your tests.

Example:
    ```python
    import cogworker

    @cogworker.job(queue="mailers", retry=5)
    def send_welcome(user_id: int) -> None: ...

    send_welcome.perform_async(42)
    ```

The public names load on first use (PEP 562). `import cogworker.exitcodes` must stay cheap: the
swarm's supervisor imports a few small modules of this package and must not pay for the Redis
client, pydantic and the job machinery that only its fork server and workers use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from cogworker.api.middleware import client_chain, server_chain

if TYPE_CHECKING:
    from cogworker import aio
    from cogworker.api import limiter
    from cogworker.api.batch import Batch, BatchClosed, batch, create_batch, current_batch
    from cogworker.api.batch_status import BatchStatus, batch_status
    from cogworker.api.cancel import cancel
    from cogworker.api.chain import Chain, Group, Signature, chain, chain_status, group
    from cogworker.api.client import configure
    from cogworker.api.current_job import CurrentJob, JobCancelled, current_job
    from cogworker.api.death import Death, on_death
    from cogworker.api.decorator import JobFunction, job, push_bulk
    from cogworker.api.deploy_marks import deploy_mark
    from cogworker.api.features import install_builtin_middleware
    from cogworker.api.job_status import status
    from cogworker.api.limiter import OverLimit
    from cogworker.api.named_push import RubyJob, push_named, ruby_job
    from cogworker.api.periodic import periodic
    from cogworker.api.push_outcome import PushOutcomeUnknown
    from cogworker.api.registry import JobNotFound
    from cogworker.api.results import JobFailed, ResultTimeout, result
    from cogworker.api.time_limits import JobTimeout
    from cogworker.api.typed_args import InvalidArguments
    from cogworker.ops.cancel import CancelOutcome
    from cogworker.settings import ConfigError, Settings, load_settings
    from cogworker.store.key_guard import WrongTypeKey
    from cogworker.store.replicas import NotReplicated

__version__ = "0.1.0"

_LAZY = {
    "chain": "cogworker.api.chain",
    "chain_status": "cogworker.api.chain",
    "Chain": "cogworker.api.chain",
    "Signature": "cogworker.api.chain",
    "group": "cogworker.api.chain",
    "Group": "cogworker.api.chain",
    "Batch": "cogworker.api.batch",
    "BatchClosed": "cogworker.api.batch",
    "batch": "cogworker.api.batch",
    "create_batch": "cogworker.api.batch",
    "current_batch": "cogworker.api.batch",
    "BatchStatus": "cogworker.api.batch_status",
    "batch_status": "cogworker.api.batch_status",
    "configure": "cogworker.api.client",
    "Death": "cogworker.api.death",
    "on_death": "cogworker.api.death",
    "push_bulk": "cogworker.api.decorator",
    "JobFunction": "cogworker.api.decorator",
    "JobNotFound": "cogworker.api.registry",
    "JobFailed": "cogworker.api.results",
    "JobTimeout": "cogworker.api.time_limits",
    "InvalidArguments": "cogworker.api.typed_args",
    "ResultTimeout": "cogworker.api.results",
    "result": "cogworker.api.results",
    "job": "cogworker.api.decorator",
    "periodic": "cogworker.api.periodic",
    "ConfigError": "cogworker.settings",
    "Settings": "cogworker.settings",
    "load_settings": "cogworker.settings",
    "status": "cogworker.api.job_status",
    "install_builtin_middleware": "cogworker.api.features",
    "WrongTypeKey": "cogworker.store.key_guard",
    "NotReplicated": "cogworker.store.replicas",
    "PushOutcomeUnknown": "cogworker.api.push_outcome",
    "cancel": "cogworker.api.cancel",
    "deploy_mark": "cogworker.api.deploy_marks",
    "CancelOutcome": "cogworker.ops.cancel",
    "current_job": "cogworker.api.current_job",
    "CurrentJob": "cogworker.api.current_job",
    "JobCancelled": "cogworker.api.current_job",
    "OverLimit": "cogworker.api.limiter",
    "push_named": "cogworker.api.named_push",
    "ruby_job": "cogworker.api.named_push",
    "RubyJob": "cogworker.api.named_push",
}
# Public names that are modules: `cogworker.limiter.concurrent(...)`.
_LAZY_MODULES = {
    "limiter": "cogworker.api.limiter",
    "aio": "cogworker.aio",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        if name not in _LAZY_MODULES:
            raise AttributeError(f"module 'cogworker' has no attribute {name!r}")
        value: Any = import_module(_LAZY_MODULES[name])
    else:
        value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    # The lazy names are not in the module's namespace until first used, so the default dir()
    # would hide them from tab completion and help(); list them with what is already loaded.
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "Batch",
    "BatchClosed",
    "BatchStatus",
    "CancelOutcome",
    "Chain",
    "ConfigError",
    "CurrentJob",
    "Death",
    "Group",
    "InvalidArguments",
    "JobCancelled",
    "JobFailed",
    "JobFunction",
    "JobNotFound",
    "JobTimeout",
    "NotReplicated",
    "OverLimit",
    "PushOutcomeUnknown",
    "ResultTimeout",
    "RubyJob",
    "Settings",
    "Signature",
    "WrongTypeKey",
    "__version__",
    "aio",
    "batch",
    "batch_status",
    "cancel",
    "chain",
    "chain_status",
    "client_chain",
    "configure",
    "create_batch",
    "current_batch",
    "current_job",
    "deploy_mark",
    "group",
    "install_builtin_middleware",
    "job",
    "limiter",
    "load_settings",
    "on_death",
    "periodic",
    "push_bulk",
    "push_named",
    "result",
    "ruby_job",
    "server_chain",
    "status",
]
