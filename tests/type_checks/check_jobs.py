"""What a type checker must accept and refuse of typed jobs; `make lint` runs mypy (strict) and pyright
over this folder.

Each `assert_type` must hold under both. Each line that must be an error carries the two checkers'
own ignore comments, naming the error: `# type: ignore[code]` for mypy (warn_unused_ignores) and
`# pyright: ignore[rule]` for pyright (reportUnnecessaryTypeIgnoreComment, and pyright honours no
`# type: ignore`, pyproject.toml [tool.pyright]). When the error disappears, the unused comment
fails the check, so every line here can fail. tests/unit/api/test_typed_jobs.py shows that it does.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Coroutine
from typing import Any, assert_type

import cogworker
from cogworker.api.chain import Signature
from cogworker.contrib.django import on_commit, perform_on_commit

from .jobs import Order, add, fetch, no_options, plain, remind, report, send_welcome, ship


def calling_runs_the_function_and_returns_its_type() -> None:
    assert_type(add(1, 2), int)
    assert_type(report("acme", day=3), str)
    assert_type(ship(Order(1)), Order)
    assert_type(plain(1), str)
    assert_type(no_options(), float)
    assert_type(send_welcome(1, locale="fr"), None)
    add("1", 2)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


async def an_async_job_returns_its_coroutine() -> None:
    assert_type(await fetch("https://example.com"), bytes)
    pending: Coroutine[Any, Any, bytes] = fetch("https://example.com")
    pending.close()
    fetch.perform_async("https://example.com")
    fetch.perform_async(b"bytes")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


def perform_async_takes_the_functions_arguments() -> None:
    assert_type(add.perform_async(1, 2), str | None)
    add.perform_async(1, b=2)
    send_welcome.perform_async(42, locale="fr")
    report.perform_async("acme", day=1)
    ship.perform_async(Order(1), note="fragile")
    pushed: Callable[[int, int], str | None] = add.perform_async
    del pushed
    add.perform_async("not", "ints", "and", "too", "many")  # type: ignore[call-arg, arg-type]  # pyright: ignore[reportCallIssue]
    add.perform_async("1", 2)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    add.perform_async(1)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    send_welcome.perform_async(42, "fr")  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    send_welcome.perform_async(42, lang="fr")  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    report.perform_async("acme")  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]


def perform_in_and_perform_at_take_a_time_then_the_arguments() -> None:
    assert_type(add.perform_in(30, 1, 2), str | None)
    add.perform_in(dt.timedelta(minutes=5), 1, b=2)
    assert_type(add.perform_at(dt.datetime.now(dt.UTC), 1, 2), str | None)
    add.perform_at(1_900_000_000.0, 1, 2)
    remind.perform_in(60, seconds=5, when="soon")  # the time is positional-only
    remind.perform_at(1_900_000_000, 5, when="later")
    add.perform_in(30, "1", 2)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    add.perform_at(dt.datetime.now(dt.UTC), 1)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    add.perform_in("soon", 1, 2)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    add.perform_at("tomorrow", 1, 2)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


def set_keeps_the_types() -> None:
    urgent = add.set(queue="urgent", retry=3, timeout_s=5.0)
    assert_type(urgent.perform_async(1, 2), str | None)
    assert_type(urgent.set(unique=None).perform_in(5, 1, 2), str | None)
    send_welcome.set(expires_in=dt.timedelta(hours=1), status=False).perform_async(1, locale="de")
    add.set(backtrace=True, unique="until_executed", unique_for=60, result_ttl=0).perform_at(0, 1, 2)
    urgent.perform_async("1", 2)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    urgent.perform_async(1, 2, 3)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]


def options_are_typed_keywords() -> None:
    cogworker.job(queue="q", retry=False, status=True)(lambda: None)
    cogworker.job(priority=3)  # type: ignore[call-overload]  # pyright: ignore[reportCallIssue]
    cogworker.job(retry="five")  # type: ignore[call-overload]  # pyright: ignore[reportArgumentType]
    cogworker.job(unique="until_done")  # type: ignore[call-overload]  # pyright: ignore[reportArgumentType]
    cogworker.job(retry_on=ValueError("x"))  # type: ignore[call-overload]  # pyright: ignore[reportArgumentType]
    add.set(priority=3)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    add.set(queue=3)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    add.set(unique="until_done")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


def _one_second(count: int, exc: BaseException) -> float:
    return 1.0


def set_refuses_the_options_only_job_takes() -> None:
    add.set(retry_on=(ValueError,))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    add.set(discard_on=KeyError)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    add.set(retry_in=_one_second)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    add.set(limit=None)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


def pushes_after_the_commit_keep_the_types() -> None:
    assert_type(on_commit(add).perform_async(1, 2), str | None)
    on_commit(add.set(queue="q")).set(retry=1).perform_in(5, 1, 2)
    assert_type(perform_on_commit(add, 1, b=2), str)
    on_commit(add).perform_async("1", 2)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    on_commit(add).set(limit=None)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    perform_on_commit(add, 1)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]


def s_makes_a_chain_step() -> None:
    # Not held to the job's parameters: with pass_results=True a step gets the previous step's
    # result as its first argument, so `.s(...)` holds only the arguments after it.
    assert_type(add.s(1, 2), Signature)
    assert_type(add.s(1), Signature)
    assert_type(add.set(queue="q").s(1, 2), Signature)
    cogworker.chain(add.s(1, 2), add.s(3), pass_results=True)


def push_bulk_takes_argument_tuples() -> None:
    # The tuples are checked at run time, not against the job's parameters.
    assert_type(cogworker.push_bulk(add, [(1, 2), (3, 4)]), list[str | None])
    cogworker.push_bulk(add.set(queue="q"), [(1, 2)], at=0.0)
    cogworker.push_bulk(add.perform_async, [(1, 2)])  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


async def awaitable_pushes_take_the_functions_arguments() -> None:
    assert_type(await add.aio.perform_async(1, 2), str | None)
    assert_type(await add.set(queue="q").aio.perform_in(30, 1, b=2), str | None)
    assert_type(await send_welcome.aio.perform_at(dt.datetime.now(dt.UTC), 42, locale="fr"), str | None)
    assert_type(await fetch.aio.perform_async("https://example.com"), str | None)
    await remind.aio.perform_in(60, seconds=5, when="soon")  # the time is positional-only
    await add.aio.perform_async("not", "ints", "and", "too", "many")  # type: ignore[call-arg, arg-type]  # pyright: ignore[reportCallIssue]
    await add.aio.perform_async("1", 2)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    await send_welcome.set(queue="q").aio.perform_async(42, lang="fr")  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    assert_type(await cogworker.aio.push_bulk(add, [(1, 2)]), list[str | None])


async def a_ruby_class_takes_positional_arguments_only() -> None:
    hard_worker = cogworker.ruby_job("HardWorker", queue="ruby")
    assert_type(hard_worker.perform_async(1, "two"), str | None)
    assert_type(cogworker.push_named("HardWorker", [1, 2], queue="ruby"), str | None)
    assert_type(await cogworker.aio.push_named("HardWorker", [1], queue="ruby"), str | None)
    hard_worker.perform_async(1, b=2)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    cogworker.push_named("HardWorker", [1])  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
