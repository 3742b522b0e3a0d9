"""The Flask example's jobs: each reads the app's config through `flask.current_app`, which works
only inside the app's context. They write what they saw to RECEIPTS_FILE for the tests to read."""

from __future__ import annotations

import asyncio
import json
import os

from flask import current_app, g
from line_sink import append_line

from cogworker import current_job, job


def _record(**fields: object) -> None:
    running = current_job()
    append_line(os.environ["RECEIPTS_FILE"], json.dumps({"jid": running.jid if running else None, **fields}))


@job(queue="receipts")
def send_receipt(order_id: int, to: str) -> None:
    shop = current_app.config["SHOP_NAME"]
    g.sent_by = "worker"  # `g` belongs to this job's app context, gone after it
    _record(kind="sync", text=f"{shop}: receipt for order {order_id} to {to}", app=current_app.name)


@job(queue="receipts")
async def send_survey(order_id: int) -> None:
    await asyncio.sleep(0)
    _record(kind="async", text=f"{current_app.config['SHOP_NAME']}: survey for order {order_id}")


@job(queue="receipts")
def check_g_is_fresh() -> None:
    # A leftover from an earlier job's context would show here.
    _record(kind="g", text=str(g.get("sent_by")))
