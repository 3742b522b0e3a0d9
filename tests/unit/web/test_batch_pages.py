"""`/batches` and `/batches/<bid>` in-process (TestClient) against the session's real Redis: the
newest batches, one batch's counts, failed members and callbacks, a child linked to its parent,
hostile descriptions and errors escaped, and 404 for a bid that is not one or is gone."""

from __future__ import annotations

import json

import batch_jobs as bj
import pytest
import redis
from starlette.testclient import TestClient

import cogworker
from cogworker.api import retry
from cogworker.settings import Settings
from cogworker.store import keys
from cogworker.web import create_app
from cogworker.worker.settle import Settler
from tests.support import components

SCRIPT = "<script>alert(1)</script>"


@pytest.fixture
def client(settings: Settings) -> TestClient:
    return TestClient(create_app(settings), follow_redirects=False)


def test_the_pages_show_a_batch_and_escape_what_it_holds(
    client: TestClient, r: redis.Redis, configured: Settings
) -> None:
    assert "No batches" in client.get("/batches").text
    with cogworker.batch(SCRIPT, on_complete=bj.on_complete, callback_args=("x",)) as parent:
        bj.dies.perform_async("a")
        with cogworker.batch("child") as child:
            bj.ok.perform_async("b")
    raw = r.rpop(keys.queue("default"))  # the first member pushed: the one that dies
    r.lpush(keys.in_progress("web:1:x"), raw)
    settler = Settler(components.build(configured).ctx, keys.in_progress("web:1:x"))
    settler.file(raw, retry.on_failure(json.loads(raw), RuntimeError(SCRIPT)))
    listing = client.get("/batches").text
    assert f'data-bid="{parent.bid}"' in listing and f'data-bid="{child.bid}"' in listing
    assert SCRIPT not in listing and "&lt;script&gt;" in listing
    page = client.get(f"/batches/{parent.bid}")
    assert page.status_code == 200
    text = page.text
    assert SCRIPT not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "2 total, 1 pending, 1 done, 1 failed (1 dead)" in text
    assert "batch_jobs.on_complete" in text and "on_complete" in text
    assert f'href="/batches/{child.bid}"' not in text  # the child is pending, not failed
    child_page = client.get(f"/batches/{child.bid}").text
    assert f'href="/batches/{parent.bid}"' in child_page
    assert "No member failed." in child_page and "No callbacks." in child_page


def test_a_bid_that_is_not_one_or_is_gone_is_404(client: TestClient, r: redis.Redis) -> None:
    assert client.get("/batches/not-hex").status_code == 404
    assert client.get("/batches/" + "0" * 24).status_code == 404
