"""retry_on / discard_on / retry_in: checked at @job, refused at .set, never in a payload, and what
retry.on_failure decides with them."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from structlog.testing import capture_logs

import cogworker
from cogworker.api import client, retry
from cogworker.api.features import check_options
from cogworker.store import keys

JOB: dict[str, Any] = {"class": "x.y", "jid": "j", "queue": "default", "retry": 5, "args": []}


@pytest.mark.parametrize(
    "options",
    [
        {"retry_on": ValueError},
        {"retry_on": (ValueError, KeyError)},
        {"discard_on": (KeyboardInterrupt,)},
        {"retry_in": lambda count, exc: 10},
        {"retry_on": None, "discard_on": None, "retry_in": None},
    ],
)
def test_good_filters_are_accepted(options: dict[str, Any]) -> None:
    check_options(options)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"retry_on": [ValueError]}, "retry_on must be an exception class or a non-empty tuple"),
        ({"retry_on": ()}, "retry_on must be"),
        ({"discard_on": "ValueError"}, "discard_on must be"),
        ({"discard_on": (ValueError, int)}, "discard_on must be"),
        ({"retry_in": 30}, "retry_in must be a function"),
    ],
)
def test_bad_filters_are_refused_at_job(options: dict[str, Any], named: str) -> None:
    with pytest.raises(TypeError, match=named):
        cogworker.job(name="x.bad", **options)(lambda: None)


def test_set_refuses_the_filters_because_they_cant_travel() -> None:
    fn = cogworker.job(name="x.set_refused", retry_on=(ValueError,))(lambda: None)
    for name, value in (("retry_on", (KeyError,)), ("discard_on", KeyError), ("retry_in", lambda c, e: 1)):
        with pytest.raises(TypeError, match=rf"{name} can only be given to @job\(...\), not .set"):
            fn.set(**{name: value})
    with pytest.raises(TypeError, match="retry_in"):
        fn.set(queue="q").set(retry_in=lambda c, e: 1)
    assert fn.set(queue="q").options["retry_on"] == (ValueError,)  # @job's own still there


def test_filters_never_reach_the_payload(r: redis.Redis, configured: object) -> None:
    fn = cogworker.job(
        name="x.filtered", retry=3, retry_on=(ValueError,), discard_on=KeyError, retry_in=lambda c, e: 1
    )(lambda: None)
    fn.perform_async(1)
    fn.set(queue="other").perform_in(60, 2)
    cogworker.push_bulk(fn, [(3,), (4,)])
    payloads = [
        *map(json.loads, r.lrange(keys.queue("default"), 0, -1)),
        *map(json.loads, r.zrange(keys.SCHEDULE, 0, -1)),
    ]
    assert len(payloads) == 4
    for payload in payloads:
        assert not {"retry_on", "discard_on", "retry_in"} & set(payload), payload
        assert payload["retry"] == 3
    built = client.build_job("x.filtered", (), {}, queue="q", options=fn.options, at=None)
    assert "retry_on" not in built


def test_discard_on_sends_to_dead_at_once_and_wins_over_retry_on() -> None:
    options = {"retry_on": (KeyError, ValueError), "discard_on": (KeyError,)}
    filing = retry.on_failure(JOB, KeyError("k"), now=100.0, options=options)
    assert filing.dead and filing.payload["retry_count"] == 0
    assert filing.payload["cogworker_notes"] == ["not retried: KeyError matches discard_on"]
    assert not retry.on_failure(JOB, ValueError("v"), now=100.0, options=options).dead


def test_retry_on_retries_only_its_errors() -> None:
    options = {"retry_on": ConnectionError}
    assert not retry.on_failure(
        JOB, ConnectionRefusedError("c"), now=100.0, options=options
    ).dead  # a subclass
    refused = retry.on_failure(JOB, ValueError("v"), now=100.0, options=options)
    assert refused.dead and refused.payload["died_at"] == 100.0
    assert refused.payload["cogworker_notes"] == ["not retried: ValueError is not in retry_on"]


def test_filters_never_add_retries() -> None:
    options = {"retry_on": (ValueError,)}
    assert retry.on_failure({**JOB, "retry": False}, ValueError("v"), now=1.0, options=options).dead
    last = {**JOB, "retry": 2, "retry_count": 1}
    assert retry.on_failure(last, ValueError("v"), now=1.0, options=options).dead


def test_retry_in_sets_the_delay_with_the_count_and_the_error() -> None:
    seen: list[tuple[int, str]] = []

    def delay(count: int, exc: BaseException) -> float:
        seen.append((count, type(exc).__name__))
        return 7.5 * (count + 1)

    first = retry.on_failure(JOB, ValueError("v"), now=100.0, options={"retry_in": delay})
    assert first.score == 107.5
    second = retry.on_failure(first.payload, OSError("o"), now=200.0, options={"retry_in": delay})
    assert second.score == 215.0
    assert seen == [(0, "ValueError"), (1, "OSError")]


@pytest.mark.parametrize(
    ("answer", "logged"),
    [
        ("soon", "retry_in_bad_value"),
        (-1, "retry_in_bad_value"),
        (float("nan"), "retry_in_bad_value"),
        (True, "retry_in_bad_value"),
        (1e12, "retry_in_bad_value"),
        (ZeroDivisionError("boom"), "retry_in_failed"),
        (SystemExit(3), "retry_in_failed"),
        (None, None),
    ],
)
def test_a_bad_retry_in_falls_back_to_the_default_backoff(answer: Any, logged: str | None) -> None:
    def delay(count: int, exc: BaseException) -> Any:
        if isinstance(answer, BaseException):
            raise answer
        return answer

    with capture_logs() as logs:
        filing = retry.on_failure(JOB, ValueError("v"), now=100.0, options={"retry_in": delay})
    assert not filing.dead
    assert 115 <= filing.score <= 124  # count 0 on the default curve
    assert [e["event"] for e in logs] == ([logged] if logged else [])


def test_without_options_the_default_rules_hold() -> None:
    filing = retry.on_failure(JOB, ValueError("v"), now=100.0)
    assert not filing.dead and 115 <= filing.score <= 124
    assert "cogworker_notes" not in filing.payload
