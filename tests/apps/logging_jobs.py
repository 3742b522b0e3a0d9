"""Jobs that log through the standard library, as an app and its libraries do
(tests/e2e/worker/test_job_logging.py). Each line's message names the job's `tag`, so a test finds
the lines of one run."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading

from cogworker import job

log = logging.getLogger(__name__)
# Named like a third-party library's loggers: nothing in this app configures them.
library = logging.getLogger("vendorlib.client")
chatty = logging.getLogger("vendorlib.chatty")  # COGWORKER_LOG_LEVELS=vendorlib.chatty=error in the tests
verbose = logging.getLogger("logging_jobs.verbose")  # COGWORKER_LOG_LEVELS=logging_jobs.verbose=debug


@job
def logs_everything(tag: str) -> None:
    log.info("app info %s", tag)
    log.warning("app warning %s", tag)
    try:
        raise ValueError(f"app error {tag}")
    except ValueError:
        log.exception("app exception %s", tag)
    library.info("library info %s", tag, extra={"endpoint": "/v1/charge"})
    library.warning("library warning %s", tag)
    try:
        raise KeyError(f"library error {tag}")
    except KeyError:
        library.exception("library exception %s", tag)
    log.debug("app debug %s", tag)  # below COGWORKER_LOG_LEVEL=info: dropped
    verbose.debug("verbose debug %s", tag)  # its logger is at debug: kept
    chatty.warning("chatty warning %s", tag)  # its logger is at error: dropped
    chatty.error("chatty error %s", tag)
    # A thread started in a copy of the job's context carries the job's fields.
    context = contextvars.copy_context()
    helper = threading.Thread(target=context.run, args=(log.warning, "thread warning %s", tag))
    helper.start()
    helper.join()


@job
async def logs_async(tag: str) -> None:
    log.info("async info %s", tag)
    await asyncio.sleep(0)
    library.warning("async library warning %s", tag)


@job(retry=False)
def fails(tag: str) -> None:
    raise ValueError(f"failing {tag}")
