"""The logging page's example (docs/guide/logging.md): a job that logs through the standard library
and through structlog, and a thread it starts in a copy of its context."""

from __future__ import annotations

import contextvars
import logging
import threading

import structlog

from cogworker import job

log = logging.getLogger(__name__)


@job
def send_invoice(invoice_id: int) -> None:
    log.info("sending invoice %s", invoice_id)
    structlog.get_logger().info("invoice_rendered", invoice_id=invoice_id, pages=2)
    # A copy of the job's context, so the thread's lines carry the job's jid, job and queue too.
    context = contextvars.copy_context()
    archiver = threading.Thread(target=context.run, args=(archive, invoice_id))
    archiver.start()
    archiver.join()


def archive(invoice_id: int) -> None:
    try:
        raise ConnectionError("archive store unreachable")
    except ConnectionError:
        log.exception("could not archive invoice %s", invoice_id)
