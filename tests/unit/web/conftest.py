"""The Web UI's page tests: the app in-process (Starlette's TestClient) over the session's flushed Redis.
A redirect is returned, not followed, so a test sees where an action sends the browser
(test_sets_pages.py follows them, with a `client` of its own)."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from cogworker.settings import Settings
from cogworker.web import create_app


@pytest.fixture
def client(settings: Settings) -> TestClient:
    return TestClient(create_app(settings), follow_redirects=False)
