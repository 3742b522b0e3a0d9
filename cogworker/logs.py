"""structlog setup: a console renderer on a terminal, JSON lines otherwise (journald, files). The
standard library's `logging` (apps, libraries) is routed through the same processors (log_stdlib.py)."""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any

import orjson
import structlog
from structlog import _output as structlog_output

from cogworker import codec, log_stdlib
from cogworker.log_levels import parse_log_levels

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def _orjson_dumps(value: Any, default: Any = None) -> str:
    try:
        return orjson.dumps(value, default=default or str).decode()
    except orjson.JSONEncodeError:
        # A line that holds text orjson refuses (bytes from Redis that weren't UTF-8, an exception
        # message with a lone surrogate) is written escaped: logging must never raise into the code
        # that logs, a job thread's filing above all.
        return orjson.dumps(codec.sanitise(value, []), default=default or str).decode()


def _renew_write_locks() -> None:
    """structlog writes each line under a lock per file (its WRITE_LOCKS, which it doesn't export).
    A thread of the parent writing a line when it forked leaves that lock held in the child, and
    the child's first line would wait forever: a preloading fork server forks workers while app
    threads log (docs/architecture.md, "Locks across a fork"). Every line of ours builds its logger
    anew (cache_logger_on_first_use=False), so it takes the new lock."""
    locks = getattr(structlog_output, "WRITE_LOCKS", None)
    if locks is not None:
        for file in list(locks):
            locks[file] = threading.Lock()


os.register_at_fork(after_in_child=_renew_write_locks)


# Process-wide context (pid, identity, slot). Not contextvars: threads start with an empty context,
# and every job thread's lines must carry these too.
_process_context: dict[str, Any] = {}
_threshold = logging.INFO


def enabled(level: str) -> bool:
    """Whether lines at `level` are written. The per-job lines check this first: a call through
    structlog's lazy logger builds a bound logger even when the level then drops the line."""
    return _LEVELS[level] >= _threshold


def _add_process_context(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
    for key, value in _process_context.items():
        event.setdefault(key, value)
    return event


def bind_process(**context: Any) -> None:
    _process_context.update(context)


def configure(level: str = "info", fmt: str = "auto", levels: str = "", **context: Any) -> None:
    """(Re)configure logging for this process and bind process-wide context (pid, identity, slot).
    `levels`: COGWORKER_LOG_LEVELS, levels per stdlib logger (`urllib3=warning,myapp.jobs=debug`).
    Called by the processes cogworker owns only, never on import (log_stdlib.py)."""
    global _threshold
    _threshold = _LEVELS[level]
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: Any = (
        structlog.processors.JSONRenderer(serializer=_orjson_dumps)
        if use_json
        # Plain tracebacks: with `rich` installed, structlog's default would print every frame's
        # local variables, a Redis URL with its password among them (redis-py's from_url has one).
        else structlog.dev.ConsoleRenderer(colors=False, exception_formatter=structlog.dev.plain_traceback)
    )
    # What every line gets, structlog's and the standard library's alike.
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        _add_process_context,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.format_exc_info if use_json else structlog.dev.set_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    _process_context.clear()
    _process_context.update(pid=os.getpid(), **context)
    log_stdlib.route(
        sys.stderr,
        log_stdlib.formatter(shared, renderer, use_json),
        _LEVELS[level],
        parse_log_levels(levels),
    )
