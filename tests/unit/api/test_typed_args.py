"""Typed arguments (api/typed_args.py): what a push writes for models, dataclasses, datetimes, UUIDs,
Decimals and Enums, the path in a push's TypeError, the rebuild before the call (through the fake
testing mode, which runs the worker's conversion), InvalidArguments naming the field when a payload no
longer fits, forward references and TYPE_CHECKING-only names, and plain jobs left exactly as they were."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest
import redis
import typed_jobs
from pydantic import BaseModel

import cogworker
from cogworker import job, testing
from cogworker.api import typed_args
from cogworker.settings import Settings
from tests.support.first_call import first_call

if TYPE_CHECKING:
    from collections import OrderedDict  # never importable at run time in this module

ORDER = typed_jobs.Order(
    id=uuid.UUID("12345678-1234-4678-9234-567812345678"),
    total=Decimal("10.10"),
    ship_to=typed_jobs.Address(street="1 Main St", zip="02134"),
)
WINDOW = typed_jobs.Window(
    start=dt.datetime(2026, 1, 2, 9, tzinfo=dt.UTC), end=dt.datetime(2026, 1, 2, 17, tzinfo=dt.UTC)
)


def pushed(r: redis.Redis, queue: str = "typed") -> dict[str, Any]:
    raw = r.lindex(f"cogworker:queue:{queue}", 0)
    assert raw is not None
    return dict(json.loads(raw))


def test_a_push_writes_typed_arguments_as_json(r: redis.Redis, configured: Settings) -> None:
    jid = typed_jobs.ship.perform_async(ORDER, WINDOW, speed=typed_jobs.Speed.EXPRESS, note="fragile")
    payload = pushed(r)
    assert payload["jid"] == jid
    assert payload["args"] == [
        {
            "id": "12345678-1234-4678-9234-567812345678",
            "total": "10.10",
            "ship_to": {"street": "1 Main St", "zip": "02134"},
        },
        {"start": "2026-01-02T09:00:00Z", "end": "2026-01-02T17:00:00Z"},
    ]
    assert payload["kwargs"] == {"speed": "express", "note": "fragile"}


def test_a_bad_typed_argument_is_a_type_error_at_push_naming_its_path(
    r: redis.Redis, configured: Settings
) -> None:
    with pytest.raises(TypeError, match=r"args\[0\]\['ship_to'\]\['zip'\]: Field required"):
        typed_jobs.ship.perform_async({"id": str(ORDER.id), "total": "1", "ship_to": {"street": "x"}}, WINDOW)
    with pytest.raises(TypeError, match=r"kwargs\['speed'\]: Input should be 'standard' or 'express'"):
        typed_jobs.ship.perform_async(ORDER, WINDOW, speed="teleport")
    assert r.llen("cogworker:queue:typed") == 0


def test_push_bulk_converts_every_argument_list_first(r: redis.Redis, configured: Settings) -> None:
    jids = cogworker.push_bulk(typed_jobs.ship, [(ORDER, WINDOW), (ORDER, WINDOW, "express")])
    assert len(jids) == 2 and r.llen("cogworker:queue:typed") == 2
    with pytest.raises(TypeError, match=r"args\[1\]"):
        cogworker.push_bulk(typed_jobs.ship, [(ORDER, WINDOW), (ORDER, "not a window")])
    assert r.llen("cogworker:queue:typed") == 2


def test_the_job_gets_its_values_rebuilt() -> None:
    # The testing modes run a job through the worker's conversion: the body sees the real types.
    with testing.fake():
        jid = typed_jobs.ship.perform_async(ORDER, WINDOW, typed_jobs.Speed.EXPRESS)
        assert typed_jobs.ship.jobs[0]["args"][0]["total"] == "10.10"
        typed_jobs.ship.perform_one()
        assert cogworker.result(str(jid), timeout=0) == {
            "order": "Order",
            "zip": "02134",
            "total": "10.11",
            "id_version": 4,
            "hours": 8.0,
            "speed": "EXPRESS",
            "note": "",
        }
    with testing.inline():
        jid = typed_jobs.ship_strict.perform_async(ORDER)
        assert cogworker.result(str(jid), timeout=0) == "02134"


def test_a_payload_that_no_longer_validates_names_the_field() -> None:
    plan = typed_jobs.ship.typed
    assert isinstance(plan, typed_args.TypedArgs)
    with pytest.raises(cogworker.InvalidArguments) as caught:
        plan.load([{"id": "nope", "total": "1", "ship_to": {"street": "x"}}], {})
    message = str(caught.value)
    assert "args[0]['id']: Input should be a valid UUID" in message
    assert "args[0]['ship_to']['zip']: Field required" in message
    assert "nope" not in message  # the input isn't quoted: it may be a secret
    assert isinstance(caught.value, TypeError)
    assert type(caught.value).__module__ == "cogworker"


def test_plain_jobs_have_no_plan_and_keep_their_values(r: redis.Redis, configured: Settings) -> None:
    assert typed_jobs.plain.typed is None
    typed_jobs.plain.perform_async(1, ["a"])
    assert pushed(r)["args"] == [1, ["a"]]
    with pytest.raises(TypeError, match=r"args\[0\]: datetime is not JSON-native"):
        typed_jobs.plain.perform_async(dt.datetime.now(), [])


@dataclasses.dataclass
class Point:
    x: int
    y: int


def test_parameter_kinds_star_args_and_containers() -> None:
    def many(first: Point, /, *rest: uuid.UUID, when: dt.date | None = None, **extra: Decimal) -> None:
        pass

    plan = typed_args.plan(many, strict=True)
    assert plan is not None
    u = uuid.uuid4()
    args, kwargs = plan.dump((Point(1, 2), u, u), {"when": dt.date(2026, 3, 1), "fee": Decimal("1.5")})
    assert args == [{"x": 1, "y": 2}, str(u), str(u)]
    assert kwargs == {"when": "2026-03-01", "fee": "1.5"}
    back, kwargs_back = plan.load(args, kwargs)
    assert back == [Point(1, 2), u, u] and kwargs_back == {"when": dt.date(2026, 3, 1), "fee": Decimal("1.5")}

    def containers(points: list[tuple[int, int]], by_id: dict[str, uuid.UUID], n: int) -> None:
        pass

    plan = typed_args.plan(containers, strict=True)
    assert plan is not None and plan.positional[2] is None
    assert plan.load([[[1, 2]], {"a": str(u)}, 3], {}) == ([[(1, 2)], {"a": u}, 3], {})

    def json_only(a: int, b: dict[str, list[float]] | None, c: Any, d) -> None:  # type: ignore[no-untyped-def]
        pass

    assert typed_args.plan(json_only, strict=True) is None


class Later(BaseModel):
    n: int


def test_forward_references_are_planned_on_first_use() -> None:
    @job(name="typed.forward")
    def forward(item: Defined_Below) -> int:  # type: ignore[name-defined]  # noqa: F821
        return int(item.n)

    assert isinstance(forward.typed, typed_args.PlanLater)
    globals()["Defined_Below"] = Later
    try:
        with testing.fake():
            forward.perform_async(Later(n=3))
            assert forward.jobs[0]["args"] == [{"n": 3}]
        assert isinstance(forward.typed, typed_args.TypedArgs)
    finally:
        del globals()["Defined_Below"]


def test_a_name_only_imported_for_type_checking_leaves_the_parameter_plain() -> None:
    @job(name="typed.checking_only")
    def checking_only(table: OrderedDict[str, int], when: dt.datetime) -> None:
        pass

    assert isinstance(checking_only.typed, typed_args.PlanLater)
    plan = checking_only.typed
    args, _ = plan.dump(({"a": 1}, dt.datetime(2026, 1, 1, tzinfo=dt.UTC)), {})
    assert args == [{"a": 1}, "2026-01-01T00:00:00Z"]
    assert isinstance(checking_only.typed, typed_args.TypedArgs)
    assert checking_only.typed.positional[0] is None

    @job(name="typed.checking_only_plain")
    def plain_only(table: OrderedDict[str, int]) -> None:
        pass

    assert plain_only.typed.load([{"a": 1}], {}) == ([{"a": 1}], {})
    assert plain_only.typed is None


def test_first_call_pushes_a_typed_job_from_a_fresh_interpreter(r: redis.Redis, redis_server: Any) -> None:
    jid = first_call(
        """
        import datetime as dt, uuid
        from decimal import Decimal
        import typed_jobs as t
        order = t.Order(id=uuid.uuid4(), total=Decimal("1.5"), ship_to=t.Address(street="s", zip="z"))
        when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        print(t.ship.perform_async(order, t.Window(start=when, end=when)))
        """,
        redis_server.url,
        COGWORKER_REQUIRE="typed_jobs",
    )
    payload = pushed(r)
    assert payload["jid"] == jid
    assert payload["args"][0]["total"] == "1.5" and payload["args"][1]["start"] == "2026-01-01T00:00:00Z"
