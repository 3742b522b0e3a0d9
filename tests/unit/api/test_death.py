"""`cogworker.on_death`: registering hooks, and calling them for one death notice (a hook that raises
is logged and harms neither the others nor the caller)."""

from __future__ import annotations

from typing import Any

import pytest
from structlog.testing import capture_logs

import cogworker
from cogworker import codec
from cogworker.api import death


def notice(cause: str = "failed", **fields: Any) -> str:
    job = {"class": "x.y", "jid": "j1", "args": [1], "error_class": "ValueError", "error_message": "bad"}
    return death.notice(cause, codec.dumps({**job, **fields}))


def test_on_death_is_a_decorator_that_registers_once() -> None:
    @cogworker.on_death
    def hook(job: dict[str, Any], d: cogworker.Death) -> None:
        pass

    assert cogworker.on_death(hook) is hook
    assert death.hooks() == [hook]


def test_on_death_refuses_what_it_cant_call() -> None:
    with pytest.raises(TypeError, match="on_death takes a function fn\\(job, death\\), not int"):
        cogworker.on_death(42)  # type: ignore[arg-type]
    assert death.hooks() == []


def test_each_hook_gets_the_job_and_why_it_died() -> None:
    calls: list[tuple[dict[str, Any], cogworker.Death]] = []
    cogworker.on_death(lambda job, d: calls.append((job, d)))
    assert death.call_hooks(notice("killed", killed_at=5.0)) == 0
    [(job, why)] = calls
    assert job["jid"] == "j1" and job["args"] == [1] and job["killed_at"] == 5.0
    assert why == cogworker.Death(cause="killed", error_class="ValueError", error_message="bad")


def test_a_raising_hook_is_logged_and_the_others_still_run_on_their_own_copy() -> None:
    seen: list[dict[str, Any]] = []

    def spoiler(job: dict[str, Any], d: cogworker.Death) -> None:
        job["args"].append("spoiled")
        raise RuntimeError("hook down")

    def quitter(job: dict[str, Any], d: cogworker.Death) -> None:
        raise SystemExit(2)

    cogworker.on_death(spoiler)
    cogworker.on_death(quitter)
    cogworker.on_death(lambda job, d: seen.append(job))
    with capture_logs() as logs:
        assert death.call_hooks(notice()) == 2
    assert seen == [{**seen[0], "args": [1]}]  # not the spoiled copy
    failed = [e for e in logs if e["event"] == "death_hook_failed"]
    assert [(e["hook"], e["jid"], e["error"]) for e in failed] == [
        (
            f"{__name__}.test_a_raising_hook_is_logged_and_the_others_still_run_on_their_own_copy.<locals>.spoiler",
            "j1",
            "RuntimeError: hook down",
        ),
        (
            f"{__name__}.test_a_raising_hook_is_logged_and_the_others_still_run_on_their_own_copy.<locals>.quitter",
            "j1",
            "SystemExit: 2",
        ),
    ]


def test_an_unreadable_notice_is_logged_not_raised() -> None:
    calls: list[object] = []
    cogworker.on_death(lambda job, d: calls.append(job))
    with capture_logs() as logs:
        assert death.call_hooks("not json") == 0
        assert death.call_hooks('{"cause": "failed", "job": [1]}') == 0
    assert calls == []
    assert [e["event"] for e in logs] == ["death_notice_unreadable"] * 2


def test_the_cause_of_a_filing() -> None:
    assert death.cause_of({"class": "x.y"}) == death.FAILED
    assert death.cause_of({"class": "cogworker.UnreadablePayload"}) == death.UNREADABLE
