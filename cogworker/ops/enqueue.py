"""`cogworker enqueue`: push a job by its registered name with JSON arguments.

The job is looked up the way a worker would (COGWORKER_REQUIRE imported first, then
`registry.resolve`), so its own options (queue, retry, unique) and the client middleware apply. When its
module can't be imported here (an ops host without the app) it is pushed by name with a warning:
the workers that can import it will run it. When its module imports but holds no such job, it is a
typo, and nothing is pushed.

A name that is a Ruby constant path (`HardWorker`, `Billing::InvoiceJob`) and no registered Python job
here (`@job(name="HardWorker")` would be one, once COGWORKER_REQUIRE is imported) is a Ruby class: it
is pushed for Sidekiq as `cogworker.push_named` pushes it (api/named_push.py), with positional
arguments only and an explicit --queue, since no Python job says which queue Sidekiq reads it from.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from typing import Any

import orjson
import redis

from cogworker import codec
from cogworker.api import client, features, named_push, payload
from cogworker.api.decorator import JobFunction
from cogworker.api.payload import DEFAULT_QUEUE, DEFAULT_RETRIES
from cogworker.api.registry import JobNotFound, RegisteredJob, is_registered, resolve, under_modules
from cogworker.ops import OpsError
from cogworker.settings import Settings
from cogworker.worker.main import BootError, import_app


class BadArguments(OpsError):
    """The arguments given can't make a job (bad JSON, not JSON-native, a bad queue or delay)."""


@dataclass(frozen=True, slots=True)
class Enqueued:
    jid: str | None  # None: a client middleware stopped the push (a duplicate unique job)
    job: str
    queue: str
    at: float | None  # when it is due, if scheduled
    resolved: bool  # False: pushed by name, unchecked against the job's code
    warnings: list[str]
    ruby: bool = False  # pushed for a Ruby class (Sidekiq runs it)


def parse_json_args(text: str | None) -> list[Any]:
    if text is None or not text.strip():
        return []
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise BadArguments(
            f"arguments are not valid JSON ({exc}): give a JSON array, e.g. '[42, \"a\"]'"
        ) from None
    if not isinstance(value, list):
        raise BadArguments(
            f"arguments must be a JSON array, e.g. '[{text.strip()}]', not {type(value).__name__}"
        )
    return value


def parse_json_kwargs(text: str | None) -> dict[str, Any]:
    if text is None or not text.strip():
        return {}
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise BadArguments(f"--kwargs is not valid JSON ({exc}): give a JSON object") from None
    if not isinstance(value, dict):
        raise BadArguments(f"--kwargs must be a JSON object, not {type(value).__name__}")
    return value


def check_name(name: str) -> None:
    """A job name a payload can carry. The command line gives bytes that aren't UTF-8 as lone
    surrogates (Python's surrogateescape), which no JSON payload can hold: refused here with the
    bytes shown, not found later as an encoding error deep in the push."""
    if not codec.is_utf8(name):
        raise BadArguments(
            f"the job name '{codec.escape(name)}' is not valid UTF-8 (a byte that isn't is shown as \\xNN)"
        )
    if not name.strip():
        raise BadArguments("the job name is empty: give a job's registered name, e.g. myapp.jobs.send_email")


def _push_by_name(*args: Any, **kwargs: Any) -> None:
    """Stands in for a job this process can't import; never called here."""
    raise RuntimeError("a job pushed by name runs only in a worker that can import it")


def import_jobs(settings: Settings) -> list[str]:
    """Import COGWORKER_REQUIRE as a worker would; the warning to show if that failed."""
    try:
        import_app(settings.require_modules)
    except BootError as exc:
        return [str(exc)]
    return []


def lookup(name: str, settings: Settings) -> tuple[RegisteredJob, list[str]]:
    """The job named `name`, or a stand-in that pushes by name, with warnings to show."""
    warnings = import_jobs(settings)
    module_name = name.rpartition(".")[0]
    if not is_registered(name) and not under_modules(module_name, settings.require_modules):
        warnings.append(
            f"{module_name or name!r} is not under COGWORKER_REQUIRE here: a worker with these settings "
            f"files {name!r} as an unknown job (it imports only jobs of its COGWORKER_REQUIRE modules)"
        )
    try:
        # The operator typed this name: importing its module runs nothing they couldn't run
        # themselves. Workers, which take names from payloads, import only under COGWORKER_REQUIRE.
        return resolve(name, allowed=(*settings.require_modules, module_name)), warnings
    except JobNotFound as exc:
        # resolve() imported the name's module if it could: then the job is simply not in it.
        if module_name and module_name in sys.modules:
            raise OpsError(f"{exc}; nothing pushed") from None
        warnings.append(
            f"{exc}: pushed by name, unchecked; a worker that can import it will run it "
            f"(with the default options: queue {DEFAULT_QUEUE!r} unless --queue, {DEFAULT_RETRIES} retries)"
        )
    return JobFunction(_push_by_name, name, {}), warnings


def enqueue(
    settings: Settings,
    conn: redis.Redis,
    name: str,
    args: list[Any],
    kwargs: dict[str, Any],
    *,
    queue: str | None = None,
    in_s: float | None = None,
) -> Enqueued:
    check_name(name)
    try:
        payload.check_arguments(args, kwargs)
    except TypeError as exc:
        raise BadArguments(str(exc)) from None
    if in_s is not None and (not math.isfinite(in_s) or in_s < 0):
        raise BadArguments(f"--in must be a number of seconds, 0 or more, not {in_s}")
    if named_push.is_ruby_name(name):
        warnings = import_jobs(settings)
        if not is_registered(name):
            return _enqueue_ruby(settings, conn, name, args, kwargs, queue, in_s, warnings)
    fn, warnings = lookup(name, settings)
    options = dict(fn.options)
    if queue is not None:
        try:
            features.check_options({"queue": queue})
        except TypeError as exc:
            raise BadArguments(str(exc)) from None
        options["queue"] = queue
    client.configure(settings, conn)
    features.ensure_installed()
    at = time.time() + in_s if in_s else None
    queue_name = str(options.get("queue") or DEFAULT_QUEUE)
    jid = client.push(fn.name, args, kwargs, queue=queue_name, options=options, at=at)
    return Enqueued(
        jid=jid,
        job=fn.name,
        queue=queue_name,
        at=at,
        resolved=fn.func is not _push_by_name,
        warnings=warnings,
    )


def _enqueue_ruby(
    settings: Settings,
    conn: redis.Redis,
    name: str,
    args: list[Any],
    kwargs: dict[str, Any],
    queue: str | None,
    in_s: float | None,
    warnings: list[str],
) -> Enqueued:
    """Push for Ruby class `name`, which no Python job here is named."""
    if kwargs:
        raise BadArguments(
            f"{name} is no Python job here, so it runs in Ruby, which takes positional arguments only: "
            "give them in JSON_ARGS, not --kwargs"
        )
    if queue is None:
        raise BadArguments(
            f"{name} is no Python job here, so it is pushed for Ruby's Sidekiq: give --queue, the queue "
            f"Sidekiq reads it from (a Python job named {name} must be in a COGWORKER_REQUIRE module)"
        )
    client.configure(settings, conn)
    at = time.time() + in_s if in_s else None
    try:
        job = named_push.build_named(name, args, queue=queue, at=at)
    except TypeError as exc:
        raise BadArguments(str(exc)) from None
    jid = client.send(job)
    return Enqueued(jid=jid, job=name, queue=queue, at=at, resolved=False, warnings=warnings, ruby=True)
