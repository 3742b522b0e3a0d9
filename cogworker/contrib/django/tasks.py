"""A backend for Django's tasks framework: `@task` functions run on cogworker workers.

Django 6 ships the framework as `django.tasks`; Django 6 needs Python 3.12, so on older Django the
`django-tasks` package (the same API, as `django_tasks`) provides it. Either is used, Django's own first.

    TASKS = {"default": {"BACKEND": "cogworker.contrib.django.tasks.CogworkerBackend",
                         "QUEUES": ["default", "emails"],
                         "OPTIONS": {"RETRY": 5, "ON_COMMIT": True}}}

`enqueue` pushes one cogworker job, `run_task`, whose arguments are the task's import path and its
arguments (checked JSON-native at once, with their path in the TypeError); the jid is the result's id.
The task's queue is the cogworker queue; `run_after` is a scheduled push; `RETRY` is the job's `retry`
(default: cogworker's, 25); `ON_COMMIT` pushes after the transaction commits (transaction.py).
A worker imports a task's module only when it is in an installed app or under COGWORKER_REQUIRE (a
payload naming anything else fails with JobNotFound): a payload is data, and importing whatever module
it names would run that module's top-level code. Not supported (validate_task refuses them at enqueue):
priorities, `takes_context`; results can't be fetched back (`supports_get_result` is False).
"""

from __future__ import annotations

import importlib
from typing import Any

from django.apps import apps

from cogworker import job
from cogworker.api import client, payload
from cogworker.api.registry import JobNotFound, under_modules
from cogworker.contrib.django.transaction import on_commit

try:
    from django.tasks import Task, TaskResult, TaskResultStatus  # type: ignore[import-not-found,unused-ignore]
    from django.tasks.backends.base import BaseTaskBackend  # type: ignore[import-not-found,unused-ignore]
    from django.tasks.exceptions import InvalidTask  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # Django before 6: the django-tasks package
    from django_tasks import TaskResult, TaskResultStatus  # type: ignore[assignment,unused-ignore]
    from django_tasks.backends.base import BaseTaskBackend  # type: ignore[assignment,unused-ignore]
    from django_tasks.base import Task  # type: ignore[assignment,unused-ignore]
    from django_tasks.exceptions import InvalidTaskError as InvalidTask  # type: ignore[assignment,unused-ignore]


@job(name="cogworker.contrib.django.tasks.run_task")
def run_task(module_path: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Run the `@task` named `module_path` (its module: in an installed app or under COGWORKER_REQUIRE)."""
    module_name, _, attr = module_path.rpartition(".")
    if not _may_import(module_name):
        raise JobNotFound(
            f"task {module_path!r}: its module is in no installed app and not under COGWORKER_REQUIRE"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise JobNotFound(f"can't import {module_name!r} for task {module_path!r}: {exc}") from exc
    # The module's own namespace, not getattr: a name from a payload must not run a module __getattr__.
    task = vars(module).get(attr)
    if not isinstance(task, Task):
        raise JobNotFound(f"{module_path!r} is not a @task function (found {type(task).__name__})")
    return task.call(*args, **kwargs)


def _may_import(module_name: str) -> bool:
    if not under_modules(module_name, [module_name]):  # not a dotted name
        return False
    if under_modules(module_name, client.settings().require_modules):
        return True
    return apps.ready and apps.get_containing_app_config(module_name) is not None


class CogworkerBackend(BaseTaskBackend):  # type: ignore[misc,unused-ignore]
    """A Django tasks backend that pushes each task as a cogworker job (`run_task`).

    Configured in settings.TASKS: `"BACKEND": "cogworker.contrib.django.tasks.CogworkerBackend"`,
    with OPTIONS `RETRY` (the job's `retry`, default 25 retries) and `ON_COMMIT` (push after the
    transaction commits). Priorities, `takes_context` and fetching results are not supported.

    Args:
        alias: The backend's alias in settings.TASKS.
        params: Its settings (QUEUES, OPTIONS...).
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = False
    supports_priority = False

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.retry: bool | int = self.options.get("RETRY", True)
        self.on_commit: bool = bool(self.options.get("ON_COMMIT", False))

    def validate_task(self, task: Any) -> None:
        """Check the task can run on this backend.

        Args:
            task: The Django task.

        Raises:
            InvalidTask: The task takes a context, or Django's own checks refuse it.
        """
        super().validate_task(task)
        if task.takes_context:
            raise InvalidTask("the cogworker backend doesn't support takes_context")

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Push the task as a cogworker job on the task's queue (scheduled for its `run_after`).

        Args:
            task: The Django task.
            args: Its positional arguments.
            kwargs: Its keyword arguments.

        Returns:
            A TaskResult whose id is the job's jid.

        Raises:
            InvalidTask: As for `validate_task`.
            TypeError: An argument is not JSON-native.
        """
        self.validate_task(task)
        payload.check_arguments(args, kwargs)
        pusher = run_task.set(queue=task.queue_name, retry=self.retry)
        if self.on_commit:
            pusher = on_commit(pusher)
        call = (task.module_path, list(args), dict(kwargs))
        if task.run_after is not None:
            jid = pusher.perform_at(task.run_after.timestamp(), *call)
        else:
            jid = pusher.perform_async(*call)
        return TaskResult(
            task=task,
            id=str(jid),
            status=TaskResultStatus.READY,
            enqueued_at=None,
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
