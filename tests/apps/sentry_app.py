"""The Sentry example of docs/integrations/sentry.md, as the tests run it: the app module a worker
imports (COGWORKER_REQUIRE=sentry_app). The DSN comes from SENTRY_DSN, as sentry_sdk.init reads it;
SENTRY_EVERY_ATTEMPT=1 reports every failed attempt, not only the last."""

from __future__ import annotations

import os

import sentry_jobs  # noqa: F401  (the jobs of this app)
import sentry_sdk

from cogworker.contrib.sentry import DEFAULT_DENYLIST, CogworkerIntegration

sentry_sdk.init(
    integrations=[
        CogworkerIntegration(
            denylist=[*DEFAULT_DENYLIST, "card_number"],
            report_every_attempt=os.environ.get("SENTRY_EVERY_ATTEMPT") == "1",
        )
    ],
)
