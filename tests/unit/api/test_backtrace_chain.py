"""What a filed backtrace holds (cogworker/api/backtrace.py `from_exception`): the whole chain root
cause first with Python's sentences, no frame of cogworker's own and no caret line, and a cap that keeps
the last frames of each exception and says how many it cut."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

import pytest

import cogworker
from cogworker.api import backtrace
from cogworker.api.retry import on_failure

PACKAGE = os.path.dirname(os.path.realpath(cogworker.__file__))


def caught(fn: Callable[[], Any]) -> BaseException:
    try:
        fn()
    except BaseException as exc:
        return exc
    raise AssertionError("it did not raise")


def lines(fn: Callable[[], Any]) -> list[str]:
    return backtrace.from_exception(caught(fn))


def runner_in_package() -> Callable[[Callable[[], Any]], Any]:
    """A function whose code says it lives inside the cogworker package, as the worker's frames do."""
    namespace: dict[str, Any] = {}
    source = "def run(job):\n    return job()\n"
    exec(compile(source, os.path.join(PACKAGE, "worker", "pretend_runner.py"), "exec"), namespace)
    return namespace["run"]  # type: ignore[no-any-return]


def parse(text: str) -> dict[str, Any]:
    values: dict[str, Any] = {"a": 1}
    return {"n": 1 + values[text] * 2}


def test_a_cause_is_kept_before_the_error_with_pythons_sentence() -> None:
    def job() -> None:
        try:
            parse("missing")
        except KeyError as exc:
            raise RuntimeError("could not parse") from exc

    found = lines(job)
    assert found[0] == "Traceback (most recent call last):"
    assert "KeyError: 'missing'" in found
    middle = found.index(backtrace.CAUSE)
    assert found.index("KeyError: 'missing'") < middle and found[middle - 1] == found[middle + 1] == ""
    assert found[-1] == "RuntimeError: could not parse"
    assert sum(line == "Traceback (most recent call last):" for line in found) == 2


def test_a_context_is_kept_and_a_suppressed_one_is_not() -> None:
    def during() -> None:
        try:
            parse("x")
        except KeyError:
            raise ValueError("while handling")  # noqa: B904 (the context is what is tested)

    assert backtrace.CONTEXT in lines(during)

    def suppressed() -> None:
        try:
            parse("x")
        except KeyError:
            raise ValueError("no context") from None

    found = lines(suppressed)
    assert backtrace.CONTEXT not in found and not any("KeyError" in line for line in found)


def test_a_cycle_in_the_chain_ends_it() -> None:
    first, second = ValueError("a"), ValueError("b")
    first.__cause__, second.__cause__ = second, first
    found = backtrace.from_exception(first)
    assert found == ["ValueError: b", "", backtrace.CAUSE, "", "ValueError: a"]


def test_cogworkers_frames_and_caret_lines_are_dropped() -> None:
    run = runner_in_package()
    found = lines(lambda: run(lambda: parse("missing")))
    assert not any("pretend_runner" in line or PACKAGE in line for line in found)
    assert any("in parse" in line for line in found)
    assert 'return {"n": 1 + values[text] * 2}' in "\n".join(found)
    assert not [line for line in found if re.fullmatch(r"\s*[\^~]+\s*", line)]


def test_an_error_raised_by_cogworker_itself_keeps_its_frames() -> None:
    run = runner_in_package()
    exc = caught(lambda: run(None))  # type: ignore[arg-type]
    trace = exc.__traceback__
    while trace is not None and "pretend_runner" not in trace.tb_frame.f_code.co_filename:
        trace = trace.tb_next  # only the frames inside the package, as for a payload it can't load
    found = backtrace.from_exception(exc.with_traceback(trace))
    assert any("pretend_runner.py" in line for line in found)
    assert found[-1] == "TypeError: 'NoneType' object is not callable"


def deep(n: int) -> None:
    if n == 0:
        raise ValueError("at the bottom")
    deep(n - 1)


def test_a_deep_stack_keeps_its_last_frames_and_says_how_many_were_cut() -> None:
    found = lines(lambda: deep(200))
    assert len(found) <= backtrace.LINES
    omitted = [line for line in found if "frames omitted" in line]
    assert len(omitted) == 1 and found[1] == omitted[0]
    cut = int(re.search(r"(\d+) frames omitted", omitted[0]).group(1))  # type: ignore[union-attr]
    kept = sum(line.startswith('  File "') for line in found)
    assert cut + kept == 203  # deep's 201 frames, the lambda's and caught's
    assert found[-3:] == [found[-3], '    raise ValueError("at the bottom")', "ValueError: at the bottom"]


def test_each_exception_of_a_chain_keeps_its_last_frames_within_the_cap() -> None:
    def job() -> None:
        try:
            deep(100)
        except ValueError as exc:
            try:
                deep(100)
            except ValueError as again:
                raise RuntimeError("twice") from again
            raise AssertionError from exc

    found = lines(job)
    assert len(found) <= backtrace.LINES
    assert sum("frames omitted" in line for line in found) == 2
    assert found.count(backtrace.CAUSE) == 1 and backtrace.CONTEXT in found
    assert found.count("ValueError: at the bottom") == 2 and found[-1] == "RuntimeError: twice"


def test_a_long_chain_keeps_its_root_and_its_last() -> None:
    exc: BaseException = KeyError("root")
    for n in range(10):
        exc = caught(lambda e=exc, n=n: _raise_from(ValueError(f"link {n}"), e))
    found = backtrace.from_exception(exc)
    messages = [line for line in found if line.startswith(("KeyError", "ValueError"))]
    assert messages == ["KeyError: 'root'", "ValueError: link 7", "ValueError: link 8", "ValueError: link 9"]
    assert any(line.startswith("… 7 chained exceptions omitted") for line in found)


def _raise_from(exc: BaseException, cause: BaseException) -> None:
    raise exc from cause


def test_a_long_message_keeps_its_first_lines() -> None:
    found = lines(lambda: _raise_from(ValueError("\n".join(f"line {n}" for n in range(40))), KeyError()))
    assert found[-1] == "… 35 more lines" and found[-6] == "ValueError: line 0"


@pytest.mark.parametrize("depth", [5, 200, 900])
def test_the_stored_field_stays_a_few_kilobytes(depth: int) -> None:
    exc = caught(lambda: deep(depth))
    filed = on_failure({"class": "x", "jid": "j", "queue": "default"}, exc, now=1.0).payload
    assert len(filed[backtrace.FIELD]) < 4_000
    assert backtrace.lines_of(filed) == backtrace.from_exception(exc)
