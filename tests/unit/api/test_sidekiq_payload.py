"""The Sidekiq mode's payload rules, without Redis: what a failure becomes (retry, dead or discarded)
for Sidekiq's `retry`/`dead` values, which `bid` is cogworker's, what a filed entry leaves out, and
Sidekiq 8's millisecond times read as such. Each rule is checked with the mode off too: unchanged."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from cogworker import codec
from cogworker.api import expiry, payload, retry, sidekiq_payload, timestamps
from cogworker.ops.queue_types import latency_of, queued_job
from cogworker.ops.set_entry import parse_entry
from cogworker.ops.set_groups import last_failure
from cogworker.store import keys
from cogworker.worker.metrics.recorder import Recorder

NOW = 1_780_000_000.0
PRO_BID = "kQz2-Vb_9XmA1w"  # SecureRandom.urlsafe_base64(10): 14 characters
OWN_BID = "0123456789abcdef01234567"  # payload.new_jid()


@pytest.fixture
def mode() -> Iterator[None]:
    keys.use_prefix("cw:", "", "6")
    yield
    keys.use_prefix(keys.DEFAULT_PREFIX)


def job(**fields: Any) -> dict[str, Any]:
    return {"class": "HardJob", "jid": "j1", "queue": "default", "args": [1], **fields}


def fail(payload_: dict[str, Any], options: dict[str, Any] | None = None) -> retry.Filing:
    return retry.on_failure(payload_, ValueError("no"), now=NOW, options=options)


# retry: false, dead: false ---------------------------------------------------------------------


def test_retry_false_is_discarded_in_the_mode(mode: None) -> None:
    filing = fail(job(retry=False))
    assert filing.set_key == "cw:discarded" == sidekiq_payload.discarded_key()
    assert filing.discarded and filing.dead  # every reader treats it as the job's end
    assert filing.payload["error_class"] == "ValueError" and filing.payload["died_at"] == NOW


def test_retry_false_goes_to_dead_with_the_mode_off() -> None:
    filing = fail(job(retry=False))
    assert filing.set_key == keys.DEAD and filing.dead and not filing.discarded


def test_dead_false_discards_only_once_out_of_retries(mode: None) -> None:
    first = fail(job(retry=2, dead=False))
    assert first.set_key == keys.RETRY == "retry" and first.payload["dead"] is False
    last = fail(job(retry=2, dead=False, retry_count=1, failed_at=NOW - 60))
    assert last.discarded and last.payload["retry_count"] == 2
    assert fail(job(retry=0, dead=False)).discarded
    # dead: true or any other value: the morgue, as Sidekiq's `unless msg["dead"] == false`.
    assert fail(job(retry=0, dead=True)).set_key == "dead"
    assert fail(job(retry=0, dead="false")).set_key == "dead"


def test_dead_false_is_ignored_with_the_mode_off() -> None:
    assert fail(job(retry=0, dead=False)).set_key == keys.DEAD


def test_a_retry_filter_refusal_with_dead_false_is_discarded(mode: None) -> None:
    options = {"discard_on": (ValueError,)}
    assert fail(job(retry=5, dead=False), options).discarded
    assert fail(job(retry=5), options).set_key == "dead"  # discard_on keeps its cogworker meaning


# retry: true -------------------------------------------------------------------------------------


@pytest.mark.parametrize("given", [True, None, "missing"])
def test_retry_true_is_the_jobs_own_option_in_the_mode(mode: None, given: Any) -> None:
    sent = job() if given == "missing" else job(retry=given)
    assert payload.sidekiq_limit(sent, {"retry": 3}) == 3
    assert payload.sidekiq_limit(sent, {}) == 25 == payload.sidekiq_limit(sent, None)
    assert payload.sidekiq_limit(sent, {"retry": True}) == 25
    # Out of its own 3: dead at the fourth failure, not after 25.
    assert fail({**sent, "retry_count": 2, "failed_at": NOW}, {"retry": 3}).set_key == "dead"
    assert fail({**sent, "retry_count": 1, "failed_at": NOW}, {"retry": 3}).set_key == "retry"
    # A job declared retry=False, pushed from Ruby (retry: true): discarded.
    assert fail(sent, {"retry": False}).discarded


def test_a_number_is_kept_as_sent_in_the_mode(mode: None) -> None:
    assert payload.sidekiq_limit(job(retry=7), {"retry": 3}) == 7
    assert fail(job(retry=0), {"retry": 3}).set_key == "dead"


def test_retry_true_is_25_whatever_the_job_says_with_the_mode_off() -> None:
    assert payload.retry_limit(job(retry=True), payload.DEFAULT_RETRIES) == 25
    assert fail(job(retry=True, retry_count=2, failed_at=NOW), {"retry": 3}).set_key == keys.RETRY


def test_will_retry_and_terminal_failure_agree_with_the_filing(mode: None) -> None:
    assert not retry.will_retry(job(retry=False), ValueError())
    assert retry.will_retry(job(retry=True), ValueError(), {"retry": 1})
    assert not retry.will_retry(job(retry=True, retry_count=0), ValueError(), {"retry": 1})
    assert payload.terminal_failure(job(retry=False), 25)
    assert payload.terminal_failure(job(retry=0, dead=False), 25)
    assert not payload.terminal_failure(job(retry=True, retry_count=3), 25)


def test_sidekiq_7s_retry_for_ends_retries_in_the_mode(mode: None) -> None:
    young = job(retry=True, retry_for=3600, retry_count=0, failed_at=NOW - 60)
    assert fail(young).set_key == "retry"
    old = {**young, "failed_at": NOW - 7200}
    assert fail(old).set_key == "dead" and fail(old).payload["retry_count"] == 1
    assert fail({**old, "failed_at": int((NOW - 7200) * 1000)}).set_key == "dead"  # Sidekiq 8's ms
    assert fail({**old, "dead": False}).discarded
    assert fail(job(retry=True, retry_for=1)).set_key == "retry"  # a first failure: none before it
    long_ago = {**old, "failed_at": 1_000_000.0}
    assert payload.terminal_failure(long_ago, 25) and not retry.will_retry(long_ago, ValueError())


def test_retry_for_is_ignored_with_the_mode_off() -> None:
    old = job(retry=True, retry_for=3600, retry_count=0, failed_at=NOW - 7200)
    assert fail(old).set_key == keys.RETRY


# bid ---------------------------------------------------------------------------------------------


def test_only_cogworkers_bids_are_batches_in_the_mode(mode: None) -> None:
    assert not sidekiq_payload.own_batch(job(bid=PRO_BID))
    assert not sidekiq_payload.batch_member(job(bid=PRO_BID))
    assert not sidekiq_payload.batch_member(job(bid=OWN_BID.upper()))  # not new_jid's shape
    assert not sidekiq_payload.batch_member(job(bid=12))
    assert sidekiq_payload.batch_member(job(bid=OWN_BID))
    assert sidekiq_payload.batch_member(job(bid=PRO_BID, bcb=[OWN_BID, "success"]))
    assert sidekiq_payload.batch_member(job(bcb=[OWN_BID, "success"]))
    assert not sidekiq_payload.batch_member(job())
    assert len(payload.new_jid()) == 24 and sidekiq_payload.own_batch(job(bid=payload.new_jid()))


def test_every_bid_is_a_batch_with_the_mode_off() -> None:
    assert sidekiq_payload.own_batch(job(bid=PRO_BID))
    assert sidekiq_payload.batch_member(job(bid=PRO_BID))


def test_a_foreign_bid_and_sidekiq_enterprise_fields_stay_as_they_came(mode: None) -> None:
    sent = job(retry=True, bid=PRO_BID, unique_for=3600, unique_until="success", unique_token="tok")
    for filing in (fail(sent), fail({**sent, "retry": False}), fail({**sent, "retry": 0})):
        stored = sidekiq_payload.for_set(filing).payload
        for name in ("bid", "unique_for", "unique_until", "unique_token"):
            assert stored[name] == sent[name]


# what a filed entry leaves out -------------------------------------------------------------------


def test_a_filed_entry_has_no_at_and_no_empty_kwargs_in_the_mode(mode: None) -> None:
    sent = job(kwargs={}, at=NOW - 5, retry=3)
    filing = sidekiq_payload.for_set(fail(sent))
    assert "at" not in filing.payload and "kwargs" not in filing.payload
    assert "kwargs" in sent and "at" in sent  # the job dict itself is not changed
    assert "at" not in json.loads(retry.storable(filing).text or "")
    kept = sidekiq_payload.for_set(fail(job(kwargs={"a": 1})))
    assert kept.payload["kwargs"] == {"a": 1}
    plain = fail(job())
    assert sidekiq_payload.for_set(plain) is plain  # nothing to leave out: no copy


def test_a_push_writes_no_at_and_no_empty_kwargs() -> None:
    built = payload.build("HardJob", [1], {}, queue="q", retry=True, extra={"at": NOW})
    assert "kwargs" not in json.loads(payload.scheduled_text(built))
    assert "at" not in json.loads(payload.scheduled_text(built))


# Sidekiq 8's milliseconds ------------------------------------------------------------------------


def test_epoch_s_tells_milliseconds_from_seconds() -> None:
    assert timestamps.epoch_s(NOW) == NOW
    assert timestamps.epoch_s(int(NOW * 1000)) == NOW
    assert timestamps.epoch_s(1_780_000_000) == 1_780_000_000.0
    for odd in (None, True, "1780000000", float("nan"), [1]):
        assert timestamps.epoch_s(odd) is None


def test_latency_of_a_millisecond_payload_is_not_a_thousand_times_off() -> None:
    raw = codec.dumps(job(enqueued_at=int((NOW - 4) * 1000), created_at=int((NOW - 9) * 1000)))
    assert latency_of(raw, NOW) == pytest.approx(4.0)
    assert queued_job(0, raw).enqueued_at == pytest.approx(NOW - 4)
    seconds = codec.dumps(job(enqueued_at=NOW - 4))
    assert latency_of(seconds, NOW) == pytest.approx(4.0)


def test_set_entries_read_millisecond_failure_times() -> None:
    failed = job(failed_at=int((NOW - 100) * 1000), retried_at=int((NOW - 10) * 1000))
    entry = parse_entry("retry", codec.dumps(failed), NOW + 30)
    assert entry.failed_at == pytest.approx(NOW - 100)
    assert last_failure(failed) == pytest.approx(NOW - 10)


def test_the_metrics_wait_of_a_millisecond_payload() -> None:
    recorder = Recorder()
    recorder.picked("q", int((NOW - 2) * 1000), NOW)
    recorder.picked("q", NOW - 2, NOW)
    recorder.picked("q", "soon", NOW)
    ((_, amounts),) = recorder.take().hashes.values()
    assert amounts == {"q|n": 3, "q|wait_ms": 4000}


def test_expiry_counts_from_a_millisecond_created_at() -> None:
    stamped: list[dict[str, Any]] = []
    expiry.stamp(job(created_at=int(NOW * 1000), expires_in=60), lambda j: stamped.append(j))
    assert stamped[0][expiry.EXPIRES_AT] == pytest.approx(NOW + 60)
    assert not expiry.expired(stamped[0], NOW + 30)
