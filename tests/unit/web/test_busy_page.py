"""`/busy` in-process (TestClient) against the session's real Redis: real `cogworker run` processes
told to quiet, resume and stop from the page (and "Pause intake" / "Resume intake" for all of them;
Stop and Pause intake ask first, saying how many processes they reach), the running-jobs table,
hostile data escaped, empty states and read-only mode."""

from __future__ import annotations

import html
import json
import re

import redis
from starlette.testclient import TestClient

from cogworker.settings import Settings, load_settings
from cogworker.store import keys
from cogworker.web import create_app
from tests.support.cli_runner import Workers, workers_fixture  # noqa: F401
from tests.support.redis_server import RedisServer, wait_until
from tests.support.web_requests import IMG, SAME_ORIGIN, SCRIPT


def flashes(text: str) -> list[tuple[str, str]]:
    found = re.findall(r'<p class="flash flash-(\w+)" role="status">(.*?)</p>', text)
    return [(kind, html.unescape(message)) for kind, message in found]


def post(client: TestClient, path: str, data: dict[str, str]) -> list[tuple[str, str]]:
    response = client.post(path, data={"back": "/busy", **data}, headers=SAME_ORIGIN)
    assert response.status_code == 303, response.text
    return flashes(client.get(response.headers["location"]).text)


def asks(client: TestClient, path: str, data: dict[str, str]) -> str:
    """The confirmation question a form gets instead of acting (nothing is sent to a process)."""
    response = client.post(path, data={"back": "/busy", **data}, headers=SAME_ORIGIN)
    assert response.status_code == 200 and 'name="confirm" value="yes"' in response.text, response.text
    question = re.search(r'<p class="question">(.*?)</p>', response.text, re.DOTALL)
    assert question is not None
    return html.unescape(question.group(1))


def states(client: TestClient) -> dict[str, str]:
    """identity -> the state badge the page shows for it."""
    text = client.get("/busy").text
    return {
        html.unescape(i): s for i, s in re.findall(r'<tr data-identity="([^"]*)" data-state="(\w+)">', text)
    }


def fake_process(
    r: redis.Redis, identity: str, tag: str = "", quiet: str = "0", **work: dict[str, object]
) -> None:
    """A presence hash and a work hash written as a heartbeat writes them (heartbeat.lua)."""
    now = int(r.time()[0])
    info = {
        "hostname": "box-1",
        "pid": 4242,
        "identity": identity,
        "queues": ["default", "mail"],
        "concurrency": 5,
        "started_at": now - 3600,
        "version": "1.0",
        "tag": tag,
    }
    r.hset(
        keys.process(identity),
        mapping={
            "info": json.dumps(info),
            "busy": len(work),
            "rss": 50 * 2**20,
            "quiet": quiet,
            "beat": now - 2,
        },
    )
    r.sadd(keys.PROCESSES, identity)
    if work:
        r.hset(keys.work(identity), mapping={thread: json.dumps(job) for thread, job in work.items()})


def test_quiet_resume_stop_and_intake_reach_real_processes(
    client: TestClient, workers: Workers, r: redis.Redis
) -> None:
    a, b = workers.start(), workers.start()
    id_a, id_b = workers.identity(a), workers.identity(b)
    page = client.get("/busy").text
    row = page.split(f'<tr data-identity="{id_a}"')[1].split("</tr>")[0]
    assert f'<td class="num">{a.pid}</td>' in row and '<td class="num">2</td>' in row  # pid, threads
    assert "default" in row and " ago" in row and "MB" in row
    assert ">Quiet</button>" in row and ">Stop…</button>" in row and ">Resume</button>" in row
    # Pause intake comes after the processes table, as plain as the row buttons.
    assert page.index("Pause intake…") > page.index('<table id="processes">')
    assert 'class="btn danger"' not in page
    assert states(client) == {id_a: "running", id_b: "running"}

    assert post(client, "/busy/tell", {"identity": id_a, "command": "quiet"})[0][1].startswith(
        f"Told 1 process ({id_a}, "
    )
    wait_until(lambda: states(client) == {id_a: "quiet", id_b: "running"}, timeout=10, message="a quiet")
    post(client, "/busy/tell", {"identity": id_a, "command": "resume"})
    wait_until(lambda: states(client) == {id_a: "running", id_b: "running"}, timeout=10, message="a resumed")

    assert asks(client, "/busy/tell-all", {"command": "quiet"}).startswith("Pause intake on all 2 processes?")
    assert r.exists(keys.signals(id_a), keys.signals(id_b)) == 0
    assert set(states(client).values()) == {"running"}
    assert post(client, "/busy/tell-all", {"command": "quiet", "confirm": "yes"}) == [
        ("ok", "Pause intake: told 2 processes to quiet; each acts on its next heartbeat.")
    ]
    wait_until(lambda: set(states(client).values()) == {"quiet"}, timeout=10, message="every process quiet")
    assert post(client, "/busy/tell-all", {"command": "resume"}) == [
        ("ok", "Resume intake: told 2 processes to resume; each acts on its next heartbeat.")
    ]
    wait_until(
        lambda: set(states(client).values()) == {"running"}, timeout=10, message="every process running"
    )

    question = asks(client, "/busy/tell", {"identity": id_b, "command": "stop"})
    assert question.startswith(f"Stop 1 process: {id_b} (") and f"pid {b.pid}" in question
    assert r.exists(keys.signals(id_b)) == 0
    post(client, "/busy/tell", {"identity": id_b, "command": "stop", "confirm": "yes"})
    assert b.wait(timeout=15) == 0
    wait_until(lambda: list(states(client)) == [id_a], timeout=10, message="b gone from the page")
    assert post(client, "/busy/tell", {"identity": id_b, "command": "quiet"}) == [
        ("error", f"no live process {id_b} (see `cogworker status`)")
    ]


def test_a_real_running_job_is_listed_with_its_runtime(
    client: TestClient, workers: Workers, r: redis.Redis, configured: Settings
) -> None:
    import demo_jobs

    proc = workers.start()
    identity = workers.identity(proc)
    jid = demo_jobs.sleepy.perform_async("long", 4)  # ends before teardown's SIGTERM times out
    wait_until(lambda: r.lrange("test:started", 0, -1), timeout=10, message="the job to start")
    text = wait_until(
        lambda: (t := client.get("/busy").text).count("<tr data-jid=") and t,
        timeout=10,
        message="the job listed",
    )
    row = text.split('<table id="running">')[1].split(f'<tr data-jid="{jid}">')[1].split("</tr>")[0]
    assert f'title="{identity}"' in row and 'href="/queues/default"' in row
    assert "demo_jobs.sleepy" in row and f'href="/jobs/{jid}"' in row and "[&#34;long&#34;,4]" in row
    assert re.search(r'<td class="num runtime">\d+(ms|\.\ds)</td>', row), row
    assert 'id="running-jobs" data-live' in text and 'id="process-list" data-live' in text


def test_stop_on_a_busy_real_process_shows_it_stopping_while_it_drains(
    client: TestClient, workers: Workers, r: redis.Redis, configured: Settings
) -> None:
    import demo_jobs

    proc = workers.start()
    identity = workers.identity(proc)
    demo_jobs.sleepy.perform_async("draining", 3)
    wait_until(lambda: r.lrange("test:started", 0, -1), timeout=10, message="the job to start")
    # The question counts the jobs the process's beat reports running (its next beat, at the latest).
    wait_until(
        lambda: "running 1 job now" in asks(client, "/busy/tell", {"identity": identity, "command": "stop"}),
        timeout=10,
        message="the question counting the running job",
    )
    told = post(client, "/busy/tell", {"identity": identity, "command": "stop", "confirm": "yes"})
    assert told[0][0] == "ok"
    wait_until(lambda: states(client) == {identity: "stopping"}, timeout=10, message="the stopping badge")
    assert r.llen("test:ran") == 0  # still draining its job while the page says stopping
    assert proc.wait(timeout=15) == 0
    assert r.lrange("test:ran", 0, -1) == [f"draining {proc.pid}"]
    assert states(client) == {}


def test_a_swarm_childs_slot_and_hostile_work_render_as_text(client: TestClient, r: redis.Redis) -> None:
    identity = "box-1:4242:" + SCRIPT
    now_s = int(r.time()[0])
    job = {
        "queue": SCRIPT,
        "run_at": now_s - 90,
        "jid": IMG,
        "class": SCRIPT + IMG,
        "args": [SCRIPT, IMG],
    }
    fake_process(r, identity, tag="slot 3", t1=job)
    text = client.get("/busy").text
    # The times written are whole seconds of Redis's clock, so what the page shows is 0-1 s past
    # them, plus however long this took on a loaded machine.
    slack = int(r.time()[0]) - now_s + 1
    assert "<script>alert" not in text and "<img src=x" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    row = text.split('<tr data-identity="')[1].split("</tr>")[0]
    assert '<td class="num">3</td>' in row  # the slot
    assert '<td class="num">50.0 MB</td>' in row and "default, mail" in row
    beat = re.search(r">(\d+\.\d)s ago<", row)
    assert '<time datetime="' in row and beat is not None and 2.0 <= float(beat.group(1)) <= 2.0 + slack
    running = text.split('<table id="running">')[1]
    assert html.unescape(re.findall(r'<tr data-jid="([^"]*)"', running)[0]) == IMG
    assert any(f"1m{30 + extra}s" in running for extra in range(slack + 1))


def test_empty_states_and_telling_nobody(client: TestClient) -> None:
    text = client.get("/busy").text
    assert "No live process" in text and "No job is running." in text
    assert asks(client, "/busy/tell-all", {"command": "quiet"}).endswith("so none would be told.")
    assert post(client, "/busy/tell-all", {"command": "quiet", "confirm": "yes"}) == [
        ("ok", "Pause intake: no live process to tell.")
    ]
    assert post(client, "/busy/tell-all", {"command": "stop"}) == [
        ("error", "only quiet (Pause intake) or resume (Resume intake) go to every process")
    ]


def test_read_only_hides_the_buttons_and_refuses_the_commands(
    redis_server: RedisServer, r: redis.Redis
) -> None:
    client = TestClient(create_app(load_settings(redis_url=redis_server.url, web_read_only=True)))
    fake_process(r, "box-1:4242:abc")
    text = client.get("/busy").text
    assert 'data-identity="box-1:4242:abc"' in text
    assert 'method="post"' not in text and "Pause intake" not in text
    for path, data in (
        ("/busy/tell", {"identity": "box-1:4242:abc", "command": "quiet"}),
        ("/busy/tell-all", {"command": "quiet"}),
        ("/busy/tell", {"identity": "box-1:4242:abc", "command": "stop"}),
    ):
        assert client.post(path, data=data, headers=SAME_ORIGIN).status_code == 403
    assert r.exists(keys.signals("box-1:4242:abc")) == 0
