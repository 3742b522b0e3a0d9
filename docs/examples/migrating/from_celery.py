"""docs/migrating/celery.md: a Celery app's tasks, ported to cogworker (tests/e2e/docs/ runs them)."""

from __future__ import annotations

import cogworker
from cogworker import job, periodic


# Celery: @app.task(autoretry_for=(ConnectionError,), max_retries=5, default_retry_delay=10)
@job(retry=5, retry_on=(ConnectionError,), retry_in=lambda count, exc: 10, result_ttl=3600)
def add(x: int, y: int) -> int:
    return x + y


@job(result_ttl=3600)
def total(numbers: list[int]) -> int:
    return sum(numbers)


@job(queue="mail", retry=False)
def send_receipt(order_id: int) -> None:
    print(f"receipt for order {order_id}")


# Celery beat: beat_schedule = {"nightly": {"task": "...", "schedule": crontab(hour=3, minute=0)}}
@periodic("0 3 * * *", tz="Europe/Paris")
@job(queue="maintenance")
def nightly_cleanup() -> None:
    print("cleaning up")


def checkout(order_id: int) -> str | None:
    # Celery: send_receipt.apply_async((order_id,), countdown=60, expires=3600)
    return send_receipt.set(expires_in=3600).perform_in(60, order_id)


def sum_of_sums() -> cogworker.Chain | None:
    # Celery: chord([add.s(1, 2), add.s(3, 4)])(total.s())
    return cogworker.chain(cogworker.group(add.s(1, 2), add.s(3, 4)), total.s(), pass_results=True)
