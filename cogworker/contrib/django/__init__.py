"""Django integration (`pip install 'cogworker-redis[django]'`, docs/integrations/django.md).

- `"cogworker.contrib.django"` in INSTALLED_APPS: the job API is configured from `settings.COGWORKER`
  (conf.py) when Django starts, each installed app's `jobs` module is imported (discovery.py), and
  with `"TRANSACTION_AWARE": True` every push made inside an atomic block waits for its commit
  (transaction.py).
- `python manage.py cogworker run|swarm|status|...`: the `cogworker` command with the project's
  settings (management/commands/cogworker.py).
- `on_commit(job).perform_async(...)` / `perform_on_commit(job, ...)`: one push after the commit.
- `cogworker.contrib.django.worker` first in COGWORKER_REQUIRE (the management command puts it there):
  a worker sets Django up before it imports the jobs and closes stale database connections around
  each job (worker.py).
- `cogworker.contrib.django.tasks.CogworkerBackend`: Django's `@task` functions run on cogworker workers.

Nothing here imports Django until it is used: `import cogworker.contrib.django` is cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cogworker.contrib.django.conf import load_settings
    from cogworker.contrib.django.transaction import OnCommit, on_commit, perform_on_commit

_LAZY = {
    "load_settings": "cogworker.contrib.django.conf",
    "OnCommit": "cogworker.contrib.django.transaction",
    "on_commit": "cogworker.contrib.django.transaction",
    "perform_on_commit": "cogworker.contrib.django.transaction",
}


def __getattr__(name: str) -> Any:
    from importlib import import_module

    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cogworker.contrib.django' has no attribute {name!r}")
    return getattr(import_module(module), name)


__all__ = ["OnCommit", "load_settings", "on_commit", "perform_on_commit"]
