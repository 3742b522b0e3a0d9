"""The testing page's fixtures example (docs/guide/testing.md): the same tests as
test_signup.py with the pytest plugin's fixtures, plus one against a private Redis.
tests/e2e/pytest_plugin/test_fixtures.py runs this file in a pytest of its own."""

import json
from types import ModuleType

import redis
from mailer import SENT, send_email


def test_the_welcome_email_is_queued(cogworker_fake: ModuleType) -> None:
    send_email.perform_async(1, "hi")
    assert len(send_email.jobs) == 1
    cogworker_fake.drain_all()  # cogworker_fake is cogworker.testing
    assert (1, "hi") in SENT


def test_the_welcome_email_is_sent(cogworker_inline: ModuleType) -> None:
    send_email.perform_async(2, "hi")
    assert (2, "hi") in SENT


def test_the_push_reaches_redis(cogworker_redis: redis.Redis) -> None:
    jid = send_email.perform_async(3, "hi")  # to the test's private Redis
    [pushed] = cogworker_redis.lrange("cogworker:queue:mailers", 0, -1)
    assert json.loads(pushed)["jid"] == jid
