"""celery's benchmark app and tasks, as `celery -A jobs_celery worker` loads them.

Stock settings: no result backend (none of the jobs returns anything the bench reads), tasks acked
on receipt (celery's default, acks_late=False), prefetch multiplier 4. W3 shows what that default
means when a pool process dies.
"""

from __future__ import annotations

import os

import jobkit
from celery import Celery

app = Celery("jobs_celery", broker=os.environ["BENCH_REDIS_URL"])
app.conf.task_default_queue = "default"
# Silences celery 5's start-up warning; retrying the broker connection at start-up is its default anyway.
app.conf.broker_connection_retry_on_startup = True


@app.task(name="jobs_celery.noop")
def noop() -> None:
    jobkit.mark_done()


@app.task(name="jobs_celery.pickup")
def pickup(pushed_at: float) -> None:
    jobkit.record_pickup(pushed_at)


@app.task(name="jobs_celery.sleeper")
def sleeper(index: int, seconds: float) -> None:
    jobkit.sleep_job(index, seconds)
