"""`/batches` and `/batches/<bid>` with a real `cogworker run` worker: members that failed and wait
in the retry set count as failing, with their last error (not "running, 0 failed"); a finished
batch says "finished", never "done" beside "failed"; the pending members are listed, page by page,
with links to job pages that find them."""

from __future__ import annotations

import html
import json
import re

import demo_jobs
import redis
from starlette.testclient import TestClient

import cogworker
from cogworker.ops import batches as batch_ops
from cogworker.settings import Settings
from cogworker.store import keys
from tests.support.cli_runner import Workers, workers_fixture  # noqa: F401
from tests.support.redis_server import wait_until
from tests.support.web_requests import IMG, SCRIPT


def text_of(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def section(page: str, name: str) -> str:
    return page.split(f'id="{name}"')[1].split("</section>")[0]


def fact(page: str, name: str) -> str:
    """The text of one of the batch's facts (a <dd> by its id)."""
    return text_of(page.split(f'<dd id="{name}">')[1].split("</dd>")[0])


def listing_row(page: str, bid: str) -> str:
    return page.split(f'<tr data-bid="{bid}">')[1].split("</tr>")[0]


def test_a_batch_whose_members_all_fail_and_retry_reads_failing_with_their_error(
    client: TestClient, r: redis.Redis, workers: Workers, configured: Settings
) -> None:
    with cogworker.batch("nightly import") as batch:
        jids = [demo_jobs.boom.perform_async(f"row {n} is malformed") for n in range(3)]
    workers.start()  # reads default; boom retries twice, the first retry 15 s or more away
    wait_until(lambda: r.zcard(keys.RETRY) == 3, timeout=45, message="every member to fail into retry")

    page = client.get(f"/batches/{batch.bid}").text
    assert fact(page, "batch-state") == "running, 3 failing"
    assert '<dd id="batch-state"><span class="badge danger">' in page
    members = fact(page, "batch-members")
    assert (
        members == "3 in all: 3 pending (3 of them failing and retrying), 0 finished (0 succeeded, 0 failed)"
    )
    failures = section(page, "batch-failures")
    assert "No member has failed." not in failures
    for n, jid in enumerate(jids):
        row = failures.split(f'<tr data-member="{jid}" data-status="failing">')[1].split("</tr>")[0]
        assert f"ValueError: row {n} is malformed" in text_of(row)
        assert "retry 1 at" in text_of(row) and f'href="/jobs/{jid}"' in row
    pending = section(page, "batch-pending")
    assert all(f'<li data-member="{jid}">' in pending for jid in jids)
    assert pending.count(">failing</span>") == 3

    listing = listing_row(client.get("/batches").text, batch.bid)
    assert "running, 3 failing" in listing
    cells = re.findall(r'<td class="num[^"]*">(.*?)</td>', listing, re.S)
    assert [text_of(c) for c in cells] == ["3 of 3", "3", "0", "0"]  # pending, failing, finished, failed


def test_a_finished_batch_says_finished_and_how_many_of_those_failed(
    client: TestClient, r: redis.Redis, workers: Workers, configured: Settings
) -> None:
    with cogworker.batch("mixed") as batch:
        for n in range(3):
            demo_jobs.record.perform_async(f"ok {n}")
            demo_jobs.boom_once.perform_async(f"bad {n}")  # retry=False: straight to dead
    workers.start()
    wait_until(lambda: r.hget(keys.batch(batch.bid), "completed_at"), timeout=45, message="the batch to end")

    page = client.get(f"/batches/{batch.bid}").text
    members = fact(page, "batch-members")
    assert members == "6 in all: 0 pending, 6 finished (3 succeeded, 3 failed, 3 of them dead)"
    assert " done" not in members
    assert fact(page, "batch-state") == "complete with failures"
    failures = section(page, "batch-failures")
    assert failures.count('data-status="failed"') == 3 and "RuntimeError: bad" in text_of(failures)
    assert "No member is pending." in section(page, "batch-pending")
    cells = re.findall(
        r'<td class="num[^"]*">(.*?)</td>', listing_row(client.get("/batches").text, batch.bid), re.S
    )
    assert [text_of(c) for c in cells] == ["0 of 6", "0", "6", "3"]


def test_pending_members_are_listed_page_by_page_with_links_that_find_them(
    client: TestClient, r: redis.Redis, configured: Settings
) -> None:
    # More members than Redis keeps in a compact set (128), so SSCAN really pages.
    with cogworker.batch("waiting") as batch:
        jids = {demo_jobs.record.set(queue="nobody-reads").perform_async(f"m{n}") for n in range(150)}
    seen: list[str] = []
    url: str | None = f"/batches/{batch.bid}"
    pages = 0
    while url is not None:
        page = client.get(url).text
        pending = section(page, "batch-pending")
        assert "150 not ended yet" in pending
        seen += [html.unescape(m) for m in re.findall(r'<li data-member="([^"]*)">', pending)]
        following = re.search(r'<a href="([^"]+)" rel="next">', pending)
        url = html.unescape(following.group(1)) if following else None
        pages += 1
        assert pages < 20
    assert pages >= 2 and set(seen) == jids
    assert len(seen) <= len(jids) + batch_ops.SCAN_COUNT  # SSCAN may repeat, never loses one

    # Each member links to its job page, which finds it waiting in its queue.
    jid = seen[0]
    first = section(client.get(f"/batches/{batch.bid}").text, "batch-pending")
    assert f'<li data-member="{jid}"><a href="/jobs/{jid}"><code>{jid}</code></a></li>' in first
    job_page = client.get(f"/jobs/{jid}")
    assert job_page.status_code == 200 and "nobody-reads" in job_page.text


def test_a_failing_member_s_hostile_error_and_job_name_are_shown_as_text(
    client: TestClient, r: redis.Redis, configured: Settings
) -> None:
    with cogworker.batch("hostile") as batch:
        jid = demo_jobs.record.perform_async("x")
    raw = r.rpop(keys.queue("default"))
    assert raw is not None
    job = json.loads(raw) | {"class": IMG, "error_class": SCRIPT, "error_message": IMG, "retry_count": 0}
    r.zadd(keys.RETRY, {json.dumps(job): 2e9})  # as if it had failed: waiting for its retry
    page = client.get(f"/batches/{batch.bid}").text
    assert SCRIPT not in page and IMG not in page
    row = page.split(f'<tr data-member="{jid}" data-status="failing">')[1].split("</tr>")[0]
    assert "&lt;script&gt;" in row and "&lt;img src=x onerror=alert(1)&gt;" in row
