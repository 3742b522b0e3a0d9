"""Jobs that fail in the ways that used to escape the job thread: BaseException subclasses, error
messages JSON can't hold, exceptions that can't even be turned into text."""

from __future__ import annotations

from typing import Any

from cogworker import job


@job(retry=1)
def exits(code: int) -> None:
    raise SystemExit(code)


@job(retry=False)
def interrupts() -> None:
    raise KeyboardInterrupt


@job(retry=False)
def generator_exit() -> None:
    raise GeneratorExit


@job(retry=1)
def surrogate_error() -> None:
    # A lone surrogate: a Python str may hold it, UTF-8 (and so JSON and Redis) can't.
    raise ValueError("bad \udcff and \ud800 text")


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("this exception can't be turned into text")


@job(retry=False)
def unprintable() -> None:
    raise Unprintable()


@job(retry=1)
def fails(*args: Any, **kwargs: Any) -> None:
    raise RuntimeError("failed as asked")


@job
def succeeds(*args: Any, **kwargs: Any) -> None:
    """Takes anything and does nothing: a payload's odd fields are all it tests."""


@job(status=True, unique="until_executed", retry=False)
def tracked_exit(tag: str) -> None:
    """A unique, tracked job that exits: its status must say failed and its claim be given back."""
    raise SystemExit(tag)


@job(status=True, retry=3)
def tracked_fails(*args: Any) -> None:
    raise RuntimeError("tracked failure")
