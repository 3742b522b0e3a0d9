"""logs.configure() routes the standard library's `logging` through structlog's processors: the
formatter's wiring (fields, levels, tracebacks, JSON and console), the per-logger levels, and the
rule that an app's own root handler is left alone. pytest adds handlers of its own to the root logger
around each test's body, so each body runs in `bare_root()`, which puts pytest's back afterwards."""

from __future__ import annotations

import contextlib
import contextvars
import io
import json
import logging
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from cogworker import log_stdlib, logs

TOUCHED = ("tests.app", "tests.quiet", "tests.loud", *log_stdlib.QUIET_LIBRARIES)


@contextlib.contextmanager
def bare_root() -> Iterator[logging.Logger]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    for handler in handlers:
        root.removeHandler(handler)
    try:
        yield root
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)
        for name in TOUCHED:
            logging.getLogger(name).setLevel(logging.NOTSET)
        logging.captureWarnings(False)
        structlog.contextvars.clear_contextvars()


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_a_stdlib_record_gets_the_fields_of_cogworkers_own_lines(capsys: pytest.CaptureFixture[str]) -> None:
    with bare_root():
        logs.configure("info", "json", "tests.loud=debug,tests.quiet=error", identity="host:1:abc", slot=3)
        structlog.contextvars.bind_contextvars(jid="J1", job="app.charge", queue="billing")
        app = logging.getLogger("tests.app")
        app.info("charged %s cents", 1200, extra={"customer": 42})
        app.debug("below the level")
        logging.getLogger("tests.loud").debug("its logger is at debug")
        logging.getLogger("tests.quiet").warning("its logger is at error")
        try:
            {}["missing"]
        except KeyError:
            app.exception("lookup failed")
        structlog.get_logger().info("structlog_line")
        info, loud, failed, own = json_lines(capsys.readouterr().err)
        assert info["event"] == "charged 1200 cents" and info["customer"] == 42
        assert (info["jid"], info["job"], info["queue"]) == ("J1", "app.charge", "billing")
        assert (info["level"], info["logger"], info["identity"], info["slot"]) == (
            "info",
            "tests.app",
            "host:1:abc",
            3,
        )
        assert info["timestamp"].endswith("Z") and isinstance(info["pid"], int)
        assert (loud["event"], loud["level"]) == ("its logger is at debug", "debug")
        assert failed["level"] == "error" and failed["exception"].startswith(
            "Traceback (most recent call last):"
        )
        assert failed["exception"].rstrip().endswith("KeyError: 'missing'")
        # The same processors as structlog's own line: the same keys but the logger's name.
        assert set(info) - set(own) == {"logger", "customer"}


def test_a_thread_started_in_a_copy_of_the_context_carries_the_jobs_fields(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with bare_root():
        logs.configure("info", "json")
        structlog.contextvars.bind_contextvars(jid="J2", job="app.fan_out", queue="default")
        copied = threading.Thread(target=contextvars.copy_context().run, args=(logging.warning, "copied"))
        plain = threading.Thread(target=logging.warning, args=("plain",))
        for thread in (copied, plain):
            thread.start()
            thread.join()
        lines = {line["event"]: line for line in json_lines(capsys.readouterr().err)}
        assert lines["copied"]["jid"] == "J2"
        assert "jid" not in lines["plain"]  # a thread starts with an empty context


def test_the_console_renderer_prints_the_traceback_under_the_line(capsys: pytest.CaptureFixture[str]) -> None:
    with bare_root():
        logs.configure("info", "console")
        try:
            raise ValueError("bad input")
        except ValueError:
            logging.getLogger("tests.app").exception("parse failed")
        line, *traceback = capsys.readouterr().err.splitlines()
        assert "[error" in line and "parse failed" in line and "[tests.app]" in line
        assert (
            traceback[0] == "Traceback (most recent call last):" and traceback[-1] == "ValueError: bad input"
        )


def test_warnings_become_lines_and_chatty_libraries_stay_at_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with bare_root():
        logging.getLogger("urllib3").setLevel(logging.DEBUG)  # the app's choice stands
        logs.configure("debug", "json", "httpx=info")
        assert logging.getLogger("httpcore").level == logging.WARNING
        assert logging.getLogger("httpx").level == logging.INFO
        assert logging.getLogger("urllib3").level == logging.DEBUG
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("old api", DeprecationWarning, stacklevel=1)
        [line] = json_lines(capsys.readouterr().err)
        assert (line["logger"], line["level"]) == ("py.warnings", "warning") and "old api" in line["event"]


def test_a_second_configure_replaces_its_handler() -> None:
    with bare_root() as root:
        logs.configure("info", "json")
        logs.configure("warning", "console")
        assert len(root.handlers) == 1 and isinstance(root.handlers[0], log_stdlib.LineHandler)
        assert root.level == logging.WARNING


def test_an_apps_own_root_handler_is_left_alone() -> None:
    with bare_root() as root:
        own = logging.StreamHandler(io.StringIO())
        root.addHandler(own)
        root.setLevel(logging.ERROR)
        logs.configure("info", "json", "tests.loud=debug")
        assert root.handlers == [own] and root.level == logging.ERROR
        assert logging.getLogger("tests.loud").level == logging.DEBUG  # named levels still apply


def test_importing_cogworker_configures_no_logging() -> None:
    code = (
        "import logging, cogworker, cogworker.logs, cogworker.api.client\n"
        "print(len(logging.getLogger().handlers), logging.getLogger().level)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", str(logging.WARNING)]
