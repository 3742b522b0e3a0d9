"""The payload rules of the Sidekiq mode (COGWORKER_SIDEKIQ_COMPAT): what a job's `retry`, `dead` and
`bid` mean when Ruby and Python workers share one Redis, and what a filed entry leaves out.

Every function here is called only with the mode on (the callers check `keys.SIDEKIQ`, a module
global), except `own_batch` and `batch_member`, which answer as before with the mode off: every `bid`
is then cogworker's, as it always was.

- `retry: false` discards a failed job, as Sidekiq 6.4's `JobRetry#global` does: its death hooks run,
  it is counted failed, and it goes to no set a human reads. `dead: false` discards a job that is out
  of retries the same way (Sidekiq's `retries_exhausted`, which skips `send_to_morgue`). cogworker
  files a discarded job in `<prefix>discarded`, a small private set trimmed to `DISCARD_KEEP` entries
  and `DISCARD_KEEP_S`: not a dead set, only the mark a filing sent again after a lost reply finds
  (settle.lua's gate is the entry the earlier call wrote).
- `retry: true` (every Ruby push carries it) and a missing `retry` (Sidekiq: the class's option)
  mean the Python job's own `retry` option when it declares one, else Sidekiq's 25.
- A `bid` is a cogworker batch's only when the job also carries `bcb` (a batch callback) or the bid
  has the shape cogworker gives its batches (24 lowercase hex digits, payload.new_jid). Sidekiq Pro's
  bids are 14 characters of URL-safe Base64 (`SecureRandom.urlsafe_base64(10)`), so the two never
  meet. A foreign bid is opaque: the job runs as an ordinary one and the field goes with it to retry
  or dead unchanged. Sidekiq Enterprise's `unique_for`/`unique_until`/`unique_token` need nothing
  here: cogworker's unique code acts only on its own `unique: "until_executed"`.
- Sidekiq 7.1's `retry_for` (seconds since the first failure) ends retries as Sidekiq 7 does.
- A filed entry has no `at` (Sidekiq's client drops it: the score is the time) and no empty `kwargs`
  (Sidekiq's payloads have none).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from cogworker.api import timestamps
from cogworker.store import keys

SIDEKIQ_RETRIES = 25
# A discarded job's mark lives this long, and the set keeps at most this many: enough for a filing
# sent again after a lost reply (at once, or when Redis is back), bounded however many are discarded.
DISCARD_KEEP = 1_000
DISCARD_KEEP_S = 24 * 60 * 60

_OWN_BID = re.compile(r"[0-9a-f]{24}")


def discarded_key() -> str:
    """The private set discarded jobs are filed in (cogworker's prefix, never Sidekiq's)."""
    return keys.PREFIX + "discarded"


def own_batch(job: dict[str, Any]) -> bool:
    """Whether a job with a `bid` is a member of one of cogworker's batches (module docstring)."""
    if not keys.SIDEKIQ or "bcb" in job:
        return True
    bid = job.get("bid")
    return isinstance(bid, str) and _OWN_BID.fullmatch(bid) is not None


def batch_member(job: dict[str, Any]) -> bool:
    """A member of one of cogworker's batches, or a batch callback: its end is counted in its batch."""
    return "bcb" in job or ("bid" in job and own_batch(job))


def effective_retry(job: dict[str, Any], options: Mapping[str, Any] | None) -> Any:
    """The job's `retry` as the mode reads it: true or missing is the job's own option when it
    declares one (`options`: the registered job's), else true."""
    retry = job.get("retry", True)
    if retry is True or retry is None:
        own = options.get("retry") if options else None
        return True if own is None else own
    return retry


def registered_options(job: dict[str, Any]) -> Mapping[str, Any] | None:
    """The options of the job's class, when this process has it registered."""
    from cogworker.api.registry import registered

    found = registered(str(job.get("class")))
    return found.options if found is not None else None


def retry_for_passed(job: dict[str, Any], now: float) -> bool:
    """Sidekiq 7.1's `retry_for` (seconds): retries end once that long has passed since the job's
    first failure (`failed_at`, in seconds or Sidekiq 8's milliseconds), whatever its count."""
    limit_s = job.get("retry_for")
    first = timestamps.field_s(job, "failed_at")
    if isinstance(limit_s, bool) or not isinstance(limit_s, int | float) or first is None:
        return False
    return first + limit_s < now


def discards(job: dict[str, Any], options: Mapping[str, Any] | None, out_of_retries: bool) -> bool:
    """A failure the mode discards: `retry: false`, or out of retries with `dead: false`."""
    return effective_retry(job, options) is False or (out_of_retries and job.get("dead") is False)


def for_set(filing: Any) -> Any:
    """A retry.Filing as the mode stores it: no `at`, no empty `kwargs` (the job dict is not
    changed). Typed loosely: retry.py imports this module."""
    job = filing.payload
    if "at" not in job and job.get("kwargs") != {}:
        return filing
    kept = {key: value for key, value in job.items() if key != "at"}
    if kept.get("kwargs") == {}:
        del kept["kwargs"]
    return replace(filing, payload=kept, text=None)
