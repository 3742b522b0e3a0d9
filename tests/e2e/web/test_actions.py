"""The UI's actions, clicked in a real browser, change what a real swarm does: "Retry now" on a dead
entry runs the job, "Pause intake" quiets every process (and "Resume intake" undoes it), and a queue
paused from /queues is not fetched from until it is resumed.

The module shares one swarm (two children running demo_jobs) and one `cogworker web`; every test
leaves the swarm fetching again, whatever happens.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import demo_jobs
import pytest
import redis
from playwright.sync_api import Page

from cogworker import codec
from cogworker.ops import processes as process_ops
from cogworker.ops import queues as queue_ops
from cogworker.settings import Settings
from cogworker.store import keys
from tests.support.browser import Watched
from tests.support.redis_server import wait_until
from tests.support.set_entries import dead_job
from tests.support.swarm import Swarm, stays

pytestmark = pytest.mark.slow


def ran(r: redis.Redis, tag: str) -> bool:
    return any(line.split(" ")[0] == tag for line in r.lrange("test:ran", 0, -1))


def flash_ok(page: Page) -> str:
    """The success flash the action left (it fails on an error flash, with its text)."""
    page.wait_for_selector(".flash")
    errors = page.locator(".flash-error").all_inner_texts()
    assert not errors, f"the action failed: {errors}"
    return page.locator(".flash-ok").first.inner_text()


def confirm_if_asked(page: Page) -> None:
    """An action the UI asks about first gets its "Yes, do it"."""
    yes = page.get_by_role("button", name="Yes, do it")
    if yes.count():
        yes.click()


def swarm_identities(swarm: Swarm) -> set[str]:
    ids = swarm.identities()
    return {ids[pid] for pid in swarm.current_children().values()}


@pytest.fixture
def fetching_again(rc: redis.Redis) -> Iterator[None]:
    """Whatever a test does, the swarm fetches from every queue afterwards."""
    yield
    process_ops.tell(rc, "resume")
    for name in queue_ops.paused_queues(rc):
        queue_ops.resume(rc, name)


def test_retry_now_on_a_dead_entry_runs_the_job(
    page: Watched, swarm: Swarm, rc: redis.Redis, web_settings: Settings
) -> None:
    jid = "b0000000000000000000dead"
    job = dead_job(jid, **{"class": "demo_jobs.record", "args": ["retried-from-ui"], "queue": "default"})
    rc.zadd(keys.DEAD, {codec.dumps(job): time.time()})
    p = page.page
    p.goto("/dead")
    row = p.locator(f'#entries tr[data-jid="{jid}"]')
    assert row.count() == 1, p.inner_text("main")
    row.get_by_role("button", name="Retry now", exact=True).click()
    assert flash_ok(p)
    wait_until(lambda: ran(rc, "retried-from-ui"), timeout=15, message="the retried job to run")
    assert rc.zcard(keys.DEAD) == 0
    assert p.locator(f'#entries tr[data-jid="{jid}"]').count() == 0
    assert not page.problems()


def status_json(settings: Settings) -> dict[str, object]:
    """What `cogworker status --json` says (the CLI reads the same ops functions as the UI)."""
    env = dict(os.environ, COGWORKER_REDIS_URL=settings.redis_url)
    out = subprocess.run(
        [sys.executable, "-m", "cogworker", "status", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    found: dict[str, object] = json.loads(out.stdout)
    return found


def quiet_by_identity(r: redis.Redis) -> dict[str, bool]:
    return {p.identity: p.quiet for p in process_ops.processes(r)}


def test_pause_intake_quiets_every_process_and_resume_intake_undoes_it(
    page: Watched, swarm: Swarm, rc: redis.Redis, web_settings: Settings, fetching_again: None
) -> None:
    identities = swarm_identities(swarm)
    assert len(identities) == 2
    p = page.page
    p.goto("/busy")
    for identity in identities:
        assert p.locator(f'#processes tr[data-identity="{identity}"]').count() == 1, p.inner_text("main")

    p.get_by_role("button", name="Pause intake…", exact=True).click()
    confirm_if_asked(p)
    assert flash_ok(p)
    wait_until(
        lambda: (
            {i: q for i, q in quiet_by_identity(rc).items() if i in identities}
            == dict.fromkeys(identities, True)
        ),
        timeout=10,
        message="every process of the swarm quiet",
    )
    status = status_json(web_settings)
    listed = [proc for proc in status["processes"] if proc["identity"] in identities]  # type: ignore[attr-defined]
    assert len(listed) == 2 and all(proc["quiet"] for proc in listed), listed
    p.reload()
    for identity in identities:
        assert "quiet" in p.locator(f'#processes tr[data-identity="{identity}"]').inner_text().lower()

    demo_jobs.record.perform_async("pushed-while-quiet")
    stays(lambda: not ran(rc, "pushed-while-quiet"), 1.0, "a quiet swarm runs nothing")

    p.get_by_role("button", name="Resume intake", exact=True).click()
    confirm_if_asked(p)
    assert flash_ok(p)
    wait_until(lambda: ran(rc, "pushed-while-quiet"), timeout=15, message="the job to run after resume")
    wait_until(
        lambda: not any(quiet_by_identity(rc).get(i) for i in identities),
        timeout=10,
        message="every process fetching again",
    )
    assert not page.problems()


def test_a_queue_paused_from_the_page_is_not_fetched_until_resumed(
    page: Watched, swarm: Swarm, rc: redis.Redis, web_settings: Settings, fetching_again: None
) -> None:
    demo_jobs.record.perform_async("before-pause")  # the queue is listed once something was pushed to it
    wait_until(lambda: ran(rc, "before-pause"), timeout=15, message="the first job to run")
    p = page.page
    p.goto("/queues")
    row = p.locator('#queues tr[data-queue="default"]')
    assert row.count() == 1, p.inner_text("main")
    row.get_by_role("button", name="Pause", exact=True).click()
    assert flash_ok(p)
    assert rc.sismember(keys.PAUSED, "default")

    demo_jobs.record.perform_async("while-paused")
    stays(lambda: not ran(rc, "while-paused"), 1.5, "a paused queue is not fetched from")
    assert rc.llen(keys.queue("default")) == 1
    p.reload()
    assert "paused" in p.locator('#queues tr[data-queue="default"]').inner_text().lower()

    p.locator('#queues tr[data-queue="default"]').get_by_role("button", name="Resume", exact=True).click()
    assert flash_ok(p)
    wait_until(lambda: ran(rc, "while-paused"), timeout=15, message="the job to run after the resume")
    assert not rc.sismember(keys.PAUSED, "default")
    assert not page.problems()


def test_clearing_a_queue_asks_first_and_clears_only_on_yes(
    page: Watched, swarm: Swarm, rc: redis.Redis, web_settings: Settings
) -> None:
    for i in range(3):
        demo_jobs.on_other.perform_async(f"to-clear-{i}")  # queue "other": this swarm doesn't read it
    p = page.page
    p.goto("/queues")
    p.locator('#queues tr[data-queue="other"]').get_by_role("button", name="Clear", exact=True).click()
    yes = p.get_by_role("button", name="Yes, do it", exact=True)
    assert yes.count() == 1, "no confirmation step"
    assert rc.llen(keys.queue("other")) == 3, "cleared before the confirmation"
    yes.click()
    assert flash_ok(p)
    assert p.url.endswith("/queues")
    assert rc.llen(keys.queue("other")) == 0
    assert not page.problems()
