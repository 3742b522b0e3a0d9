"""`/batches` and `/batches/<bid>` in-process (TestClient) against the session's real Redis: the
newest batches, one batch's counts, failed members and callbacks, a child linked to its parent,
hostile descriptions and errors escaped, and 404 for a bid that is not one or is gone; the "Release
holds" button, which asks first, frees a batch held by a killed app once, and is absent (its POST
refused) in read-only mode."""

from __future__ import annotations

import html
import json
import re

import batch_jobs as bj
import redis
from starlette.testclient import TestClient

import cogworker
from cogworker.api import retry
from cogworker.settings import Settings, load_settings
from cogworker.store import keys
from cogworker.web import create_app
from cogworker.worker.settling.settle import Settler
from tests.support import components
from tests.support.batches import stuck_batch
from tests.support.redis_server import RedisServer
from tests.support.web_requests import SAME_ORIGIN, SCRIPT


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
    assert "2 in all: 1 pending, 1 finished (0 succeeded, 1 failed, 1 of them dead)" in text
    assert "batch_jobs.on_complete" in text and "on_complete" in text
    failures = text.split('id="batch-failures"')[1].split("</section>")[0]
    pending = text.split('id="batch-pending"')[1].split("</section>")[0]
    assert f'href="/batches/{child.bid}"' not in failures  # the child is pending, not failed
    assert f'<li data-member="b:{child.bid}"><a href="/batches/{child.bid}">' in pending
    child_page = client.get(f"/batches/{child.bid}").text
    assert f'href="/batches/{parent.bid}"' in child_page
    assert "No member has failed." in child_page and "No callbacks." in child_page


def test_a_bid_that_is_not_one_or_is_gone_is_404(client: TestClient, r: redis.Redis) -> None:
    assert client.get("/batches/not-hex").status_code == 404
    assert client.get("/batches/" + "0" * 24).status_code == 404


def flashes(text: str) -> list[tuple[str, str]]:
    found = re.findall(r'<p class="flash flash-(\w+)" role="status">(.*?)</p>', text)
    return [(kind, html.unescape(message)) for kind, message in found]


def test_release_holds_asks_first_then_frees_a_stuck_batch_once(
    client: TestClient, r: redis.Redis, redis_server: RedisServer
) -> None:
    bid = stuck_batch(redis_server.url, "stuck")
    page = client.get(f"/batches/{bid}").text
    assert 'id="holds"' in page and 'action="/batches/release"' in page and ">Release holds</button>" in page
    form = {"bid": bid, "back": f"/batches/{bid}"}
    asked = client.post("/batches/release", data=form, headers=SAME_ORIGIN)
    assert asked.status_code == 200 and f"Release every hold on batch {bid}?" in asked.text
    assert r.hget(keys.batch(bid), "holds") == "1"  # nothing happens before the confirmation
    done = client.post("/batches/release", data={**form, "confirm": "yes"}, headers=SAME_ORIGIN)
    assert done.status_code == 303 and done.headers["location"] == f"/batches/{bid}"
    after = client.get(done.headers["location"]).text
    assert flashes(after) == [("ok", f"Batch {bid}: released 1 hold(s).")]
    assert 'id="holds"' not in after and r.hget(keys.batch(bid), "holds") == "0"
    again = client.post("/batches/release", data={**form, "confirm": "yes"}, headers=SAME_ORIGIN)
    repeated = flashes(client.get(again.headers["location"]).text)
    assert repeated == [("ok", f"Batch {bid}: no hold to release.")]
    gone = client.post("/batches/release", data={"bid": "0" * 24, "confirm": "yes"}, headers=SAME_ORIGIN)
    assert flashes(client.get(gone.headers["location"]).text)[0][0] == "error"


def test_read_only_shows_no_release_button_and_refuses_the_post(
    r: redis.Redis, redis_server: RedisServer
) -> None:
    bid = stuck_batch(redis_server.url, "stuck")
    read_only = TestClient(create_app(load_settings(redis_url=redis_server.url, web_read_only=True)))
    assert ">Release holds</button>" not in read_only.get(f"/batches/{bid}").text
    refused = read_only.post("/batches/release", data={"bid": bid, "confirm": "yes"}, headers=SAME_ORIGIN)
    assert refused.status_code == 403
    assert r.hget(keys.batch(bid), "holds") == "1"
