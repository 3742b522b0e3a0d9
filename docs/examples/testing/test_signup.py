"""The testing page's example (docs/guide/testing.md): a user's own tests of code that
pushes jobs, in the testing modes. tests/e2e/docs/test_guide_examples.py runs them."""

from mailer import SENT, send_email

from cogworker import testing


def test_the_welcome_email_is_queued() -> None:
    with testing.fake():  # pushes are recorded, nothing touches Redis
        send_email.perform_async(1, "hi")
        assert len(send_email.jobs) == 1
        send_email.drain()  # run them (and what they push); also perform_one, testing.drain_all()
    assert (1, "hi") in SENT


def test_the_welcome_email_is_sent() -> None:
    with testing.inline():  # pushes run at once, through the server middleware chain
        send_email.perform_async(2, "hi")
    assert (2, "hi") in SENT
