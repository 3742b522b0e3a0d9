"""The test project's jobs: the cogworker job and the Django `@task` each mark an order shipped."""

from __future__ import annotations

from django.db import connection

try:  # Django 6: the framework is Django's own; before it, the django-tasks package
    from django.tasks import task
except ImportError:
    from django_tasks import task

from cogworker import job
from django_shop.models import Order


def _session() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


@job(queue="django")
def ship(order_id: int) -> None:
    Order.objects.filter(id=order_id).update(shipped=True, shipped_by_session=_session())


@task(queue_name="django")
def ship_task(order_id: int, note: str = "") -> None:
    Order.objects.filter(id=order_id).update(shipped=True, note=note or "by task")
