"""Jobs for the Sentry tests (tests/e2e/integrations/test_sentry.py)."""

from __future__ import annotations

from typing import Any

import sentry_sdk

from cogworker import job


@job(queue="reported", retry=1, retry_in=lambda count, exc: 0)
def charge(card_number: str, amount: int, *, password: str = "", meta: dict[str, Any] | None = None) -> None:
    raise ValueError(f"declined: {amount}")


@job(queue="reported", retry=False)
def once(note: str) -> None:
    raise KeyError(note)


@job(queue="reported")
def fine(note: str) -> None:
    """Leaves a tag and a breadcrumb on its scope: no later job's event may carry them."""
    sentry_sdk.set_tag("left_by", note)
    sentry_sdk.add_breadcrumb(message=f"left by {note}")
