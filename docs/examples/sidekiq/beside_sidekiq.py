"""The examples of docs/guides/sidekiq.md (Running beside Sidekiq), run by
tests/e2e/sidekiq/test_guide_examples.py beside a real Sidekiq: a Python job Ruby pushes by its class
name, and a stub that pushes a job for a Ruby class."""

from __future__ import annotations

from cogworker import job


@job(name="ReportJob", queue="reports")
def report_job(account_id: int, period: str) -> None:
    print(f"report {period} for account {account_id}", flush=True)


@job(name="HardWorker", queue="ruby_default")
def hard_worker(count: int, label: str) -> None:
    raise AssertionError("HardWorker runs in Ruby")


def push_for_ruby() -> str | None:
    return hard_worker.perform_async(1, "two")
