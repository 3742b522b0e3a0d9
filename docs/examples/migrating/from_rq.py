"""docs/migrating/rq.md: RQ jobs, ported to cogworker (tests/e2e/docs/ runs them)."""

from __future__ import annotations

import datetime as dt

import cogworker
from cogworker import job, testing

DELAYS_S = [10, 30, 60]


# RQ: q.enqueue(count_words, text, retry=Retry(max=3, interval=[10, 30, 60]), job_timeout=180,
#              result_ttl=500, ttl=3600)
@job(retry=3, retry_in=lambda count, exc: DELAYS_S[count], timeout_s=180, result_ttl=500, status=True)
def count_words(text: str) -> int:
    return len(text.split())


@job(result_ttl=500)
def shout(count: int, text: str) -> str:
    return f"{text.upper()} ({count} words)"


def enqueue(text: str) -> str | None:
    # RQ: job = q.enqueue(count_words, text); job.id
    return count_words.perform_async(text)


def enqueue_later(text: str) -> str | None:
    # RQ: q.enqueue_in(timedelta(minutes=10), count_words, text)
    return count_words.perform_in(dt.timedelta(minutes=10), text)


def count_then_shout(text: str) -> cogworker.Chain | None:
    # RQ: first = q.enqueue(count_words, text); q.enqueue(shout, ..., depends_on=first)
    return cogworker.chain(count_words.s(text), shout.s(text), pass_results=True)


def counts_inline(text: str) -> int:
    # RQ: Queue(is_async=False) runs a job at once, in the caller.
    with testing.inline():
        jid = count_words.perform_async(text)
        assert jid is not None
        return int(cogworker.result(jid, timeout=0))
