"""The jobs page's example (docs/guide/jobs.md), run by tests/e2e/docs/test_guide_examples.py."""

import datetime as dt

import cogworker
from cogworker import job

SENT: list[tuple[int, str]] = []


@job(queue="mailers", retry=5)
def send_email(user_id: int, template: str) -> None:
    SENT.append((user_id, template))
    print(f"sent {template} to user {user_id}")


def push_examples() -> list[str | None]:
    when = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    return [
        send_email.perform_async(42, "welcome"),
        send_email.perform_in(60, 42, "welcome"),  # seconds (or a timedelta) from now
        send_email.perform_at(when, 42, "welcome"),  # an aware datetime or epoch seconds
        send_email.set(queue="critical").perform_async(7, "x"),
        *cogworker.push_bulk(send_email, [(1, "a"), (2, "b")]),  # one round trip per 1,000 jobs
    ]
