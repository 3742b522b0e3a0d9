"""The async and limits page's examples (docs/guide/async-and-limits.md), run by
tests/e2e/docs/test_guide_examples.py."""

import asyncio
import time

import cogworker
from cogworker import job


@job(queue="webhooks", retry=5)
async def deliver(hook_id: int) -> None:
    await asyncio.sleep(0.01)  # an async client's call: never a blocking one inside `async def`
    print(f"delivered hook {hook_id}")


@job(timeout_s=30, retry=3)
def render_report(report_id: int) -> None:
    print(f"rendered report {report_id}")


@job(expires_in=3600)  # seconds, or a timedelta
def send_reminder(user_id: int) -> None:
    print(f"reminded user {user_id}")


@cogworker.job
def export(report_id: int) -> None:
    for page in range(10_000):
        cogworker.current_job().raise_if_cancelled()  # a safe place to stop: raises JobCancelled
        write(report_id, page)


def write(report_id: int, page: int) -> None:
    time.sleep(0.05)  # stands for writing one page of the report
