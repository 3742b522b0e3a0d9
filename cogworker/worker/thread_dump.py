"""TTIN's answer: every thread's stack in the log, to see what a stuck worker is doing."""

from __future__ import annotations

import sys
import threading
import traceback

import structlog

log = structlog.get_logger("cogworker.launcher")


def dump_threads() -> None:
    names = {t.ident: t.name for t in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        stack = "".join(traceback.format_stack(frame))
        log.warning("thread_stack", thread=names.get(ident, str(ident)), stack=stack)
