"""The failures page's example (docs/guide/failures.md), run by tests/e2e/docs/test_guide_examples.py."""

import cogworker
from cogworker import job


@cogworker.on_death  # in a module the workers import (COGWORKER_REQUIRE)
def page_someone(job: dict, death: cogworker.Death) -> None:
    print(f"{job['class']} {job['jid']} died ({death.cause}): {death.error_class}: {death.error_message}")


@job(
    retry=10,
    retry_on=(ConnectionError, TimeoutError),  # only these are retried; any other error: dead at once
    discard_on=(PermissionError,),  # these: dead at once (wins over retry_on)
    retry_in=lambda count, exc: 30 * (count + 1),  # seconds before retry count+1 (count starts at 0)
)
def sync_account(account_id: int) -> None:
    if account_id < 0:
        raise PermissionError(f"account {account_id} is closed")
    if account_id == 0:
        raise ConnectionError("the bank's API is down")
