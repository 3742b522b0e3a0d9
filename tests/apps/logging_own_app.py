"""An app that configures logging itself when it is imported (tests/e2e/worker/test_job_logging.py):
its own root handler and format, which cogworker must leave in place."""

from __future__ import annotations

import logging
import logging.config

from cogworker import job

logging.config.dictConfig(
    {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"own": {"format": "OWN-FORMAT %(levelname)s %(name)s %(message)s"}},
        "handlers": {"own": {"class": "logging.StreamHandler", "formatter": "own"}},
        "root": {"handlers": ["own"], "level": "INFO"},
    }
)

log = logging.getLogger(__name__)


@job
def says(tag: str) -> None:
    log.warning("own says %s", tag)
