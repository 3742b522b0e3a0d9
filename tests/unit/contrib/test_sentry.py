"""cogworker.contrib.sentry's pieces in one process: the arguments by name and their scrubbing, and
the middleware staying out of the way when sentry_sdk was not initialised with the integration.
What a worker sends is tested end to end (tests/e2e/integrations/test_sentry.py)."""

from __future__ import annotations

from typing import Any

import pytest

from cogworker import job
from cogworker.contrib.sentry import (
    DEFAULT_DENYLIST,
    CogworkerIntegration,
    named_arguments,
    report_failures,
    scrub,
)


@job(queue="unit")
def login(user: str, password: str, *rest: Any, **extra: Any) -> None: ...


def test_positional_arguments_are_named_from_the_signature() -> None:
    payload = {"class": login.name, "args": ["ann", "pw", 1], "kwargs": {"token": "t"}}
    assert named_arguments(payload) == {
        "user": "ann",
        "password": "pw",
        "rest": (1,),
        "extra": {"token": "t"},
    }


def test_arguments_that_do_not_bind_or_an_unknown_job_are_kept_as_they_are() -> None:
    unbound = {"class": login.name, "args": [], "kwargs": {"nope": 1}}
    assert named_arguments(unbound) == {"args": [], "kwargs": {"nope": 1}}
    unknown = {"class": "gone.job", "args": [1], "kwargs": {}}
    assert named_arguments(unknown) == {"args": [1], "kwargs": {}}


def test_scrub_filters_denylisted_names_at_any_depth_whatever_their_case() -> None:
    denylist = CogworkerIntegration(denylist=["Card"]).denylist
    value = {"card": 1, "CARD": 2, "rows": [{"card": 3, "n": 4}], "t": ({"card": 5},), 6: "six"}
    assert scrub(value, denylist) == {
        "card": "[Filtered]",
        "CARD": "[Filtered]",
        "rows": [{"card": "[Filtered]", "n": 4}],
        "t": [{"card": "[Filtered]"}],
        6: "six",
    }
    assert CogworkerIntegration().denylist == frozenset(name.lower() for name in DEFAULT_DENYLIST)


def test_a_denylist_given_as_one_string_is_refused() -> None:
    with pytest.raises(TypeError, match="denylist must be a list of names, not the string 'password'"):
        CogworkerIntegration(denylist="password")


def test_without_sentry_initialised_the_middleware_only_runs_the_job() -> None:
    ran: list[str] = []
    report_failures({"class": login.name}, lambda: ran.append("ran"))
    assert ran == ["ran"]
