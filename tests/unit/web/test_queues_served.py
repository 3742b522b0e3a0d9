"""Which live processes read each queue, on `/queues`, a queue's page and the dashboard, with real
`cogworker run` workers: "read by N processes", the "unserved" state for a queue with jobs and no
fetching reader (none at all, or every reader quiet), paused queues kept as paused; and the queue
page's "next to run first" order, checked against the order a real worker runs the jobs in."""

from __future__ import annotations

import html
import json
import re

import demo_jobs
import redis
from starlette.testclient import TestClient

from cogworker.ops import processes as process_ops
from cogworker.settings import Settings
from cogworker.store import keys
from tests.support.cli_runner import Workers, workers_fixture  # noqa: F401
from tests.support.redis_server import wait_until
from tests.support.web_requests import SAME_ORIGIN


def push(r: redis.Redis, queue: str, count: int, start: int = 0) -> None:
    """Jobs pushed as the client pushes them (LPUSH): j<start> is pushed first, so it runs first."""
    for n in range(start, start + count):
        job = {"jid": f"j{n}", "class": "demo.work", "args": [n], "enqueued_at": 1.7e9 + n}
        r.lpush(keys.queue(queue), json.dumps(job))
    r.sadd(keys.QUEUES, queue)


def row(text: str, queue: str) -> str:
    return text.split(f'<tr data-queue="{queue}">')[1].split("</tr>")[0]


def readers_and_state(text: str, queue: str) -> tuple[str, str]:
    """The "Read by" cell's text and the state a queue's row shows."""
    found = row(text, queue)
    readers = re.search(r'<td class="readers">(.*?)</td>', found, re.S)
    state = re.search(r'data-state="(\w+)"', found)
    assert readers and state, found
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", readers.group(1))).split()), state.group(1)


def jids(text: str) -> list[str]:
    return [html.unescape(v) for v in re.findall(r'<tr data-jid="([^"]*)"', text)]


def dashboard_unserved(client: TestClient) -> int:
    found = re.search(r'id="unserved-queues">([\d,]+)<', client.get("/").text)
    assert found
    return int(found.group(1).replace(",", ""))


def test_queues_show_their_live_readers_and_flag_the_unserved_ones(
    client: TestClient, r: redis.Redis, workers: Workers
) -> None:
    both = workers.start(COGWORKER_QUEUES="mail,default")
    mail_only = workers.start(COGWORKER_QUEUES="mail")
    identities = [workers.identity(both), workers.identity(mail_only)]
    push(r, "orphan", 3)  # nobody reads it: the jobs wait for ever
    push(r, "held", 2)
    r.sadd(keys.PAUSED, "held")  # paused and unread: still shown as paused, not unserved
    r.sadd(keys.QUEUES, "empty")  # pushed to once, empty now, read by nobody: harmless

    text = client.get("/queues").text
    assert readers_and_state(text, "mail") == ("2 processes", "active")
    assert readers_and_state(text, "default") == ("1 process", "active")
    assert readers_and_state(text, "orphan") == ("no live process", "unserved")
    assert readers_and_state(text, "held") == ("no live process", "paused")
    assert readers_and_state(text, "empty") == ("no live process", "unread")
    orphan = row(text, "orphan")
    assert ">unserved</span>" in orphan and ">active<" not in orphan
    assert re.search(r"oldest waiting \d+d\d\dh", orphan)  # the latency beside the warning: enqueued in 2023
    warning = text.split('id="unserved-warning">')[1].split("</p>")[0]
    assert warning.startswith("1 queue with jobs that no live process fetches from")
    assert 'href="/queues/orphan"' in warning and "held" not in warning
    assert "resume the quiet ones" not in warning  # nobody lists orphan: there is no one to resume
    assert dashboard_unserved(client) == 1

    page = client.get("/queues/orphan").text
    assert "no live process fetches from it" in page and ">unserved</span>" in page
    assert '<dd id="queue-readers">2 live processes</dd>' in client.get("/queues/mail").text

    # Every reader of mail quiet: they still list it, but take nothing from it.
    process_ops.tell(r, "quiet", identities)
    wait_until(
        lambda: all(p.quiet for p in process_ops.processes(r)), timeout=45, message="both workers quiet"
    )
    push(r, "mail", 1, start=100)
    text = client.get("/queues").text
    assert readers_and_state(text, "mail") == ("2 processes (2 quiet)", "unserved")
    assert readers_and_state(text, "default") == ("1 process (1 quiet)", "unread")
    assert dashboard_unserved(client) == 2
    assert "or resume the quiet ones on Busy." in text.split('id="unserved-warning">')[1].split("</p>")[0]

    process_ops.tell(r, "resume", identities)
    wait_until(lambda: not any(p.quiet for p in process_ops.processes(r)), timeout=45, message="both resumed")
    assert readers_and_state(client.get("/queues").text, "mail") == ("2 processes", "active")

    # A reader that stops is no longer counted: its presence goes with it.
    mail_only.terminate()
    assert mail_only.wait(timeout=45) == 0
    wait_until(lambda: len(process_ops.processes(r)) == 1, timeout=45, message="the stopped worker to go")
    text = client.get("/queues").text
    assert readers_and_state(text, "mail") == ("1 process", "active")
    assert dashboard_unserved(client) == 1  # orphan still waits


def test_next_to_run_first_lists_the_jobs_in_the_order_a_real_worker_runs_them(
    client: TestClient, r: redis.Redis, workers: Workers, configured: Settings
) -> None:
    tags = [f"t{n}" for n in range(8)]
    pushed = {demo_jobs.record.set(queue="line").perform_async(tag): tag for tag in tags}
    # Out of order on purpose: a job requeued to the right end (as recovery does) runs before all.
    raw = r.lpop(keys.queue("line"))  # the newest (t7)
    assert raw is not None
    r.rpush(keys.queue("line"), raw)
    listed = [pushed[jid] for jid in jids(client.get("/queues/line", params={"order": "next"}).text)]
    newest = [pushed[jid] for jid in jids(client.get("/queues/line").text)]
    assert listed == ["t7", "t0", "t1", "t2", "t3", "t4", "t5", "t6"]
    assert newest == list(reversed(listed))

    # One job thread: the worker takes them one at a time, from the end it pops first.
    workers.start(COGWORKER_QUEUES="line", COGWORKER_CONCURRENCY="1")
    wait_until(lambda: r.llen("test:ran") == len(tags), timeout=45, message="the worker to run every job")
    ran = [entry.split()[0] for entry in r.lrange("test:ran", 0, -1)]
    assert ran == listed


def test_next_to_run_first_pages_keep_the_order_and_delete_the_right_job(
    client: TestClient, r: redis.Redis
) -> None:
    push(r, "mail", 60)  # j0 pushed first: it runs first
    first = client.get("/queues/mail", params={"order": "next"}).text
    assert jids(first) == [f"j{n}" for n in range(25)]
    assert 'href="/queues/mail?order=next&amp;page=2" rel="next"' in first
    assert 'href="/queues/mail?order=next&amp;page=3" rel="last"' in first
    assert '<a href="/queues/mail?order=next" class="here" aria-current="true">Next to run first</a>' in first
    second = client.get("/queues/mail", params={"order": "next", "page": 2}).text
    assert jids(second) == [f"j{n}" for n in range(25, 50)]
    assert 'href="/queues/mail?order=next" rel="prev"' in second
    assert 'href="/queues/mail?order=next&amp;page=3" rel="last"' in second  # beside Next, to the same page
    last = client.get("/queues/mail", params={"order": "next", "page": 3}).text
    assert jids(last) == [f"j{n}" for n in range(50, 60)]
    assert 'rel="next"' not in last and 'rel="last"' not in last
    numbers = re.findall(r'<td class="num">([\d,]+)</td>', last)
    assert numbers[0] == "51" and numbers[-1] == "60"  # places in the order shown

    # The Delete form of a next-first row names the job by its index from the left end.
    target = second.split('<tr data-jid="j30">')[1].split("</tr>")[0]
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', target))
    assert fields["index"] == "29"  # 60 jobs, j30 is the 31st from the right: index 60 - 1 - 30
    response = client.post("/queues/delete", data={**fields, "back": "/queues/mail"}, headers=SAME_ORIGIN)
    assert response.status_code == 303
    left = [json.loads(x)["jid"] for x in r.lrange(keys.queue("mail"), 0, -1)]
    assert len(left) == 59 and "j30" not in left

    # An order the page doesn't know is the default one.
    assert jids(client.get("/queues/mail", params={"order": "sideways"}).text)[0] == "j59"
