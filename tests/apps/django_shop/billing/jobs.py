"""Found by autodiscovery (cogworker/contrib/django/discovery.py): no COGWORKER_REQUIRE names it."""

from __future__ import annotations

from cogworker import job
from django_shop.models import Order


@job(queue="django")
def invoice(order_id: int, note: str) -> None:
    Order.objects.filter(id=order_id).update(shipped=True, note=note)
