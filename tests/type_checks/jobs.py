"""Jobs as a user declares them, for the typing checks beside this file (`make lint` runs mypy and
pyright over tests/type_checks; nothing here is collected by pytest or run)."""

from __future__ import annotations

from dataclasses import dataclass

import cogworker
from cogworker.api.limit_base import Limiter

REPORTS = cogworker.limiter.concurrent("reports", 2)


@cogworker.job
def add(a: int, b: int) -> int:
    return a + b


@cogworker.job(queue="mailers", retry=5, unique="until_executed", expires_in=3600)
def send_welcome(user_id: int, *, locale: str = "en") -> None:
    del user_id, locale


@cogworker.job(retry_on=(ConnectionError, TimeoutError), retry_in=lambda count, exc: 10.0 * (count + 1))
async def fetch(url: str) -> bytes:
    return url.encode()


def _by_tenant(tenant: str, *, day: int) -> Limiter:
    del tenant, day
    return REPORTS


@cogworker.job(limit=_by_tenant, discard_on=KeyError, timeout_s=30, result_ttl=60, status=True)
def report(tenant: str, *, day: int) -> str:
    return f"{tenant}:{day}"


@cogworker.job
def remind(seconds: int, when: str) -> None:
    """A job whose parameters share their names with perform_in's and perform_at's first one."""
    del seconds, when


@dataclass
class Order:
    id: int


@cogworker.job(backtrace=10, unique_for=60.0, limit=REPORTS)
def ship(order: Order, note: str | None = None) -> Order:
    del note
    return order


@cogworker.job()
def no_options() -> float:
    return 1.0


def _plain(x: int) -> str:
    return str(x)


# The function form, with options and a name.
plain = cogworker.job(_plain, name="typing.plain", queue="low")
