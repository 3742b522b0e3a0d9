"""docs/migrating/sidekiq.md: Sidekiq jobs, ported to cogworker (tests/e2e/docs/ runs them)."""

from __future__ import annotations

from typing import Any

import cogworker
from cogworker import job


# Sidekiq: class HardJob; include Sidekiq::Job; sidekiq_options queue: "critical", retry: 5
#          sidekiq_retry_in { |count, exception| 10 * (count + 1) }
@job(name="HardJob", queue="critical", retry=5, retry_in=lambda count, exc: 10 * (count + 1))
def hard_job(name: str, count: int) -> None:
    print(f"hard work: {name} x {count}")


@job(retry=False)
def charge(order_id: int) -> None:
    raise RuntimeError(f"card declined for order {order_id}")


@job
def import_done(bid: str, shop_id: int) -> None:
    status = cogworker.batch_status(bid)
    assert status is not None
    print(f"shop {shop_id}: {status.total - status.failed} of {status.total} rows imported")


# Sidekiq: config.death_handlers << ->(job, ex) { ... }
@cogworker.on_death
def report_death(job: dict[str, Any], death: cogworker.Death) -> None:
    print(f"died: {job['class']} {job['jid']} {death.error_class}: {death.error_message}")


def import_shop(shop_id: int, rows: int) -> str:
    # Sidekiq Pro: batch = Sidekiq::Batch.new; batch.on(:complete, ImportDone, "shop_id" => 42)
    #              batch.jobs { rows.times { |row| HardJob.perform_async("row", row) } }
    with cogworker.batch(f"import shop {shop_id}", on_complete=import_done, callback_args=(shop_id,)) as b:
        cogworker.push_bulk(hard_job, [("row", row) for row in range(rows)])
    return b.bid
