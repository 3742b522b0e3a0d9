"""Jobs that give the Web UI's pages something to show (tests/e2e/web/test_screenshots.py): a failing
payment (the retry set, with a real backtrace), mail on a queue nobody reads (a queue with a size
and a latency), a long image resize (a running job on /busy), and two periodic entries that won't
fire during a test (/periodic).
"""

from __future__ import annotations

import time

from cogworker import job, periodic


class PaymentDeclined(Exception):
    pass


@job(retry=5)
def charge_card(order_id: int, amount_cents: int) -> None:
    raise PaymentDeclined(f"card declined for order {order_id} ({amount_cents / 100:.2f} EUR)")


@job(queue="mail")
def send_welcome(user_id: int, template: str = "welcome") -> None:
    pass


@job(queue="default")
def resize_image(path: str, seconds: float = 60.0) -> None:
    time.sleep(seconds)


@periodic("0 3 * * *", tz="Europe/Paris", args=("sales",))
@job(queue="reports")
def nightly_report(kind: str) -> None:
    pass


@periodic("0 */6 * * *", tz="UTC")
@job
def prune_sessions() -> None:
    pass
