"""Jobs with typed parameters (docs/integrations/typed-arguments.md runs the same shapes): each returns
what it received, described with the types it arrived as, so a test reads it back as the result."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import uuid
from decimal import Decimal

from pydantic import BaseModel

from cogworker import InvalidArguments, job


class Address(BaseModel):
    street: str
    zip: str


class Order(BaseModel):
    id: uuid.UUID
    total: Decimal
    ship_to: Address


@dataclasses.dataclass
class Window:
    start: dt.datetime
    end: dt.datetime


class Speed(enum.Enum):
    STANDARD = "standard"
    EXPRESS = "express"


@job(queue="typed", result_ttl=60, retry=1)
def ship(order: Order, window: Window, speed: Speed = Speed.STANDARD, note: str = "") -> dict[str, object]:
    return {
        "order": type(order).__name__,
        "zip": order.ship_to.zip,
        "total": str(order.total + Decimal("0.01")),
        "id_version": order.id.version,
        "hours": (window.end - window.start).total_seconds() / 3600,
        "speed": speed.name,
        "note": note,
    }


@job(queue="typed", result_ttl=60, retry=3, discard_on=(InvalidArguments,))
def ship_strict(order: Order) -> str:
    return order.ship_to.zip


@job(queue="typed", result_ttl=60)
def plain(a: int, b: list[str]) -> list[object]:
    return [a, b]
