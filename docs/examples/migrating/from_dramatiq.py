"""docs/migrating/dramatiq.md: Dramatiq actors, ported to cogworker (tests/e2e/docs/ runs them)."""

from __future__ import annotations

import cogworker
from cogworker import job, limiter, testing

# Dramatiq: ConcurrentRateLimiter(backend, "mailer", limit=2)
MAILER = limiter.concurrent("mailer", 2, lease_s=60)


# Dramatiq: @dramatiq.actor(queue_name="emails", max_retries=3, time_limit=60_000,
#                           throws=(PermissionError,), store_results=True)
@job(queue="emails", retry=3, timeout_s=60, discard_on=(PermissionError,), result_ttl=3600, limit=MAILER)
def send_email(address: str) -> str:
    return f"sent to {address}"


@job(result_ttl=3600)
def normalize(address: str) -> str:
    return address.strip().lower()


def send_later(address: str) -> str | None:
    # Dramatiq: send_email.send_with_options(args=(address,), delay=10_000)
    return send_email.perform_in(10, address)


def normalize_then_send(address: str) -> cogworker.Chain | None:
    # Dramatiq: pipeline([normalize.message(address), send_email.message()]).run()
    return cogworker.chain(normalize.s(address), send_email.s(), pass_results=True)


def emails_in_a_test() -> list[str]:
    # Dramatiq: a StubBroker, then stub_broker.join("emails") and worker.join()
    with testing.fake():
        send_email.perform_async("ada@example.com")
        pushed = [job["args"][0] for job in send_email.jobs]
        send_email.drain()
        assert send_email.jobs == []
    return pushed
