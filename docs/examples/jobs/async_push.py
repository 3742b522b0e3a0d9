"""The jobs page's awaitable pushes (docs/guide/jobs.md, "From async code"), run by
tests/e2e/docs/test_aio_examples.py."""

import cogworker
from mailer import send_email


async def push_from_async_code() -> list[str | None]:
    return [
        await send_email.aio.perform_async(42, "welcome"),
        await send_email.aio.perform_in(60, 42, "reminder"),  # seconds (or a timedelta) from now
        await send_email.set(queue="critical").aio.perform_async(7, "x"),
        *await cogworker.aio.push_bulk(send_email, [(1, "a"), (2, "b")]),
    ]
