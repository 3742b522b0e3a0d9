"""Typed jobs (api/decorator.py, api/pusher.py, api/job_options.py): what the typed signatures
change at run time (only the options given are kept, the times are positional-only), and proof
that the typing checks `make lint` runs over tests/type_checks can fail: mypy and pyright, run on a
file with a wrong call and an ignore comment that ignores nothing, report both."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import cogworker
from cogworker import testing
from tests.support.paths import ROOT

BIN = Path(sys.executable).parent


@cogworker.job(name="typed.remind")
def remind(seconds: int, when: str) -> str:
    return f"{seconds} {when}"


@cogworker.job(name="typed.unique", unique="until_executed", queue="low")
def unique_job(n: int) -> int:
    return n


def test_only_the_options_given_are_kept() -> None:
    assert remind.options == {}
    assert unique_job.options == {"queue": "low", "unique": "until_executed"}
    assert unique_job.set().options == unique_job.options
    # None is a value: it overrides the job's own option for these pushes.
    assert unique_job.set(unique=None, retry=2).options == {"queue": "low", "unique": None, "retry": 2}
    assert unique_job.set(queue="high").set(timeout_s=5).options == {
        "queue": "high",
        "unique": "until_executed",
        "timeout_s": 5,
    }


def test_calling_a_job_returns_what_the_function_returns() -> None:
    assert remind(1, "now") == "1 now"


def test_an_unknown_keyword_is_still_a_clear_type_error_at_run_time() -> None:
    untyped: Any = cogworker.job
    with pytest.raises(TypeError, match="unknown job option"):
        untyped(name="typed.bad", priority=3)
    with pytest.raises(TypeError, match="unknown job option"):
        remind.set(**{"priority": 3})
    with pytest.raises(TypeError, match="limit can only be given to @job"):
        remind.set(**{"limit": None})


def test_a_job_may_have_parameters_named_like_the_push_times() -> None:
    with testing.fake():
        remind.perform_in(60, seconds=5, when="soon")
        remind.perform_at(1_900_000_000, 7, when="later")
        assert [job["kwargs"] for job in remind.jobs] == [{"seconds": 5, "when": "soon"}, {"when": "later"}]
        assert remind.jobs[1]["args"] == [7]
        remind.clear()


WRONG = """\
from tests.type_checks.jobs import add

add.perform_async("not", "ints", "and", "too", "many")
add.perform_async(1, 2)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
"""


@pytest.fixture
def wrong_file(tmp_path: Path) -> Path:
    path = tmp_path / "wrong_calls.py"
    path.write_text(WRONG)
    return path


def _check(argv: list[str]) -> subprocess.CompletedProcess[str]:
    # From the checkout, whose pyproject.toml configures both checkers as `make lint` runs them.
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=100)


def test_mypy_reports_a_wrong_call_and_an_ignore_that_ignores_nothing(wrong_file: Path) -> None:
    done = _check([str(BIN / "mypy"), "--strict", "--warn-unused-ignores", str(wrong_file)])
    assert done.returncode == 1, done.stdout + done.stderr
    assert "wrong_calls.py:3: error: Too many arguments" in done.stdout
    assert 'wrong_calls.py:4: error: Unused "type: ignore" comment' in done.stdout


def test_pyright_reports_a_wrong_call_and_an_ignore_that_ignores_nothing(wrong_file: Path) -> None:
    done = _check([str(BIN / "pyright"), str(wrong_file)])
    assert done.returncode == 1, done.stdout + done.stderr
    assert "wrong_calls.py:3:" in done.stdout and "(reportCallIssue)" in done.stdout
    assert "wrong_calls.py:4:" in done.stdout and "(reportUnnecessaryTypeIgnoreComment)" in done.stdout
