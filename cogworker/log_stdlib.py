"""The standard library's `logging` routed through structlog's processors (logs.py configures both).

Apps and libraries log through `logging`; cogworker logs through structlog. In a process cogworker
owns (`cogworker run`, a swarm's processes, `cogworker web`, the CLI) one handler on the root logger
formats every stdlib record with structlog's `ProcessorFormatter`, with the processors of
cogworker's own lines: a job's `logging.getLogger(__name__).info(...)` becomes a line like
`job_start`, with the job's jid, job and queue (bound in contextvars by worker/running/processor.py),
the process's pid, identity and slot, and its traceback when it has one.

Nothing is installed on `import cogworker`: an app keeps its own logging. In a worker, an app that
configures the root logger itself when it is imported (`logging.config.dictConfig` with a `root`
entry, Django's LOGGING with one, `logging.basicConfig(force=True)`) replaces the handler, and a
later configure() (a swarm child after a preloaded app) leaves its root alone.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

import structlog

# Libraries that log a line per request or per connection below warning (httpx one per request at
# info, urllib3 and botocore a stream of debug lines): at warning unless COGWORKER_LOG_LEVELS names
# them or the app already set their level.
QUIET_LIBRARIES = ("asyncio", "botocore", "httpcore", "httpx", "s3transfer", "urllib3")


class LineHandler(logging.Handler):
    """Writes each formatted record as one line through structlog's WriteLogger for the same file,
    so a stdlib line and a structlog line never interleave (they share structlog's lock for the
    file) and the lock renewed after a fork (logs.py) serves both."""

    def __init__(self, file: TextIO, formatter: logging.Formatter) -> None:
        super().__init__()
        self.file = file
        self.setFormatter(formatter)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
            # Built anew each time, like structlog's own loggers (cache_logger_on_first_use=False),
            # so it takes the lock as renewed after a fork.
            structlog.WriteLogger(self.file).msg(line)
        except Exception:
            # Never into the code that logs: logging's own report (a "--- Logging error ---" block).
            self.handleError(record)


def formatter(pre_chain: Sequence[Any], renderer: Any, use_json: bool) -> structlog.stdlib.ProcessorFormatter:
    """A stdlib formatter that runs `pre_chain` (what structlog's lines get before rendering), adds
    the logger's name and `extra=` fields, and renders with `renderer`. A record's exc_info becomes
    `exception` (its traceback as text) in JSON; the console renderer prints the traceback itself."""
    foreign: list[Any] = [
        *pre_chain,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.ExtraAdder(),
    ]
    if use_json:
        foreign.append(structlog.processors.format_exc_info)
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=foreign,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )


def route(file: TextIO, handler_formatter: logging.Formatter, level: int, levels: Mapping[str, str]) -> bool:
    """Send the root logger's records to `file` through `handler_formatter`, at `level`, with
    `levels` per logger. Returns False (and sets only `levels`) when the root logger has a handler
    that isn't cogworker's: the app configured logging itself, and its configuration stands."""
    for name, value in levels.items():  # asked for by name: honoured whoever owns the root
        logging.getLogger(name).setLevel(value.upper())
    root = logging.getLogger()
    ours = [h for h in root.handlers if isinstance(h, LineHandler)]
    if len(ours) != len(root.handlers):
        return False
    for handler in ours:
        root.removeHandler(handler)
    root.addHandler(LineHandler(file, handler_formatter))
    root.setLevel(level)
    for name in QUIET_LIBRARIES:
        library = logging.getLogger(name)
        if name not in levels and library.level == logging.NOTSET:
            library.setLevel(max(logging.WARNING, level))
    # warnings.warn() output (a DeprecationWarning from a library, "coroutine ... was never awaited")
    # as lines of the stream too, instead of bare text in the middle of it.
    logging.captureWarnings(True)
    return True
