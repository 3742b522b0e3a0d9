"""The examples of docs/migrating/beside-sidekiq.md (Running beside Sidekiq), run by
tests/e2e/sidekiq/test_guide_examples.py beside a real Sidekiq: a Python job Ruby pushes by its class
name, and pushes of jobs for Ruby classes (a handle, and by name)."""

from __future__ import annotations

import cogworker
from cogworker import job


@job(name="ReportJob", queue="reports")
def report_job(account_id: int, period: str) -> None:
    print(f"report {period} for account {account_id}", flush=True)


hard_worker = cogworker.ruby_job("HardWorker", queue="ruby_default")


def push_for_ruby() -> str | None:
    return hard_worker.perform_async(1, "two")


def push_by_name() -> str | None:
    return cogworker.push_named("HardWorker", [3, "four"], queue="ruby_default")
