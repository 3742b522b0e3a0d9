"""Processes both ways in the Sidekiq mode (6, bare keys), against Debian's real Sidekiq 6.4: Sidekiq's
API and its Web UI (served by `rackup`) show a cogworker swarm child and the job it runs, and keep it in
`processes`; Sidekiq Web's Quiet and Stop buttons reach a swarm child; `cogworker status`, cogworker's
Web UI and doctor show a running Sidekiq process marked as Ruby, and `cogworker quiet` reaches it."""

from __future__ import annotations

import contextlib
import json
import shutil
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.cookiejar import CookieJar
from pathlib import Path

import pytest
import redis
from starlette.testclient import TestClient

from cogworker import exitcodes
from cogworker.ops import doctor
from cogworker.settings import load_settings
from cogworker.store import shards
from cogworker.web import create_app
from tests.support.cli_runner import CLI, cli_fixture  # noqa: F401
from tests.support.paths import APP_DIR
from tests.support.redis_server import RedisServer, free_port, wait_until
from tests.support.sidekiq import SidekiqProcess, ruby
from tests.support.swarm import SwarmRunner, swarm_runner
from tests.support.web_server import WebServer, serving

PEER = APP_DIR / "sidekiq_peer.rb"
RUBY_JOBS = {"SIDEKIQ_JOBS": str(APP_DIR / "sidekiq_procs_jobs.rb")}
MODE = {"COGWORKER_SIDEKIQ_COMPAT": "6", "COGWORKER_REQUIRE": "sidekiq_procs_jobs"}

# What Sidekiq's own API says of every process and every running job (api.rb ProcessSet, Workers).
SIDEKIQS_VIEW = """
require "json"
procs = Sidekiq::ProcessSet.new.map do |p|
  {identity: p.identity, labels: p["labels"], queues: p["queues"], busy: p["busy"], quiet: p.stopping?,
   pid: p["pid"], concurrency: p["concurrency"], rss: p["rss"]}
end
work = []
Sidekiq::Workers.new.each do |process, tid, w|
  work << {process: process, tid: tid, queue: w["queue"], jid: w["payload"]["jid"],
           class: w["payload"]["class"], run_at: w["run_at"]}
end
members = Sidekiq.redis { |c| c.smembers("processes") }
puts JSON.dump({procs: procs, work: work, members: members})
"""


@pytest.fixture(autouse=True)
def _needs_sidekiq() -> Iterator[None]:
    if shutil.which("sidekiq") is None or shutil.which("rackup") is None:
        pytest.fail("no sidekiq or rackup on PATH: run `make test` (deploy/ensure-sidekiq.sh installs them)")
    yield
    shards.use_settings(load_settings())


@pytest.fixture
def stack() -> Iterator[contextlib.ExitStack]:
    with contextlib.ExitStack() as opened:
        yield opened


@pytest.fixture
def swarms(redis_server: RedisServer, r: redis.Redis, tmp_path: Path) -> Iterator[SwarmRunner]:
    yield from swarm_runner(redis_server.url, tmp_path)


def sidekiqs_view(url: str) -> dict[str, list[dict[str, object]]]:
    return json.loads(ruby(SIDEKIQS_VIEW, url, app=PEER))  # type: ignore[no-any-return]


def push_python_job(r: redis.Redis, tag: str, jid: str) -> None:
    """As a Ruby app pushes one (Sidekiq::Client): LPUSH onto the bare queue, the queue registered."""
    now = time.time()
    job = {"class": "ProcsPyBlock", "args": [tag], "jid": jid, "queue": "py", "retry": False}
    r.sadd("queues", "py")
    r.lpush("queue:py", json.dumps({**job, "created_at": now, "enqueued_at": now}))


@contextlib.contextmanager
def sidekiq_web(redis_url: str) -> Iterator[WebServer]:
    """Sidekiq's Web UI (tests/apps/sidekiq_web.ru) under `rackup` on a free port."""
    port = free_port()
    rackup = [
        str(shutil.which("rackup")),
        "-p",
        str(port),
        "-o",
        "127.0.0.1",
        str(APP_DIR / "sidekiq_web.ru"),
    ]
    with serving(rackup, port, {"REDIS_URL": redis_url, "PATH": "/usr/bin:/bin"}, ready_path="/busy") as web:
        yield web


def press(web: WebServer, identity: str, button: str) -> None:
    """Press a process row's Quiet or Stop button on Sidekiq's Busy page, as a browser does: the page
    with its session cookie and CSRF token, then the row's form posted."""
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
    with browser.open(f"{web.url}/busy", timeout=10) as response:
        page = response.read().decode()
    row = page.split(f'name="identity" value="{identity}"')[0].rsplit("<form", 1)[1]
    token = row.split("name='authenticity_token' value='")[1].split("'")[0]
    form = urllib.parse.urlencode({"authenticity_token": token, "identity": identity, button: "1"})
    with browser.open(f"{web.url}/busy", data=form.encode(), timeout=10) as response:
        assert response.status == 200  # the redirect back to the Busy page, followed


def release(r: redis.Redis, tag: str) -> None:
    r.set(f"procs:release:{tag}", 1)
    r.lpush(f"procs:wake:{tag}", 1)
    wait_until(lambda: tag in r.lrange("procs:ran", 0, -1), message=f"job {tag} to end")


def test_sidekiqs_api_and_web_ui_see_a_python_process_and_its_job(
    swarms: SwarmRunner, r: redis.Redis, redis_server: RedisServer
) -> None:
    swarm = swarms.start(COGWORKER_COUNT="1", COGWORKER_QUEUES="py", **MODE)
    swarm.wait_ready()
    [(pid, identity)] = swarm.identities().items()
    jid = "c0ffee" * 4
    push_python_job(r, "a", jid)
    wait_until(lambda: r.hlen(f"{identity}:workers") == 1, message="the job in Sidekiq's busy hash")

    seen = sidekiqs_view(redis_server.url)
    [proc] = [p for p in seen["procs"] if p["identity"] == identity]
    assert proc["labels"] == ["cogworker"] and proc["queues"] == ["py"] and proc["pid"] == pid
    assert proc["busy"] == 1 and proc["concurrency"] == 2 and proc["quiet"] is False
    assert isinstance(proc["rss"], int) and proc["rss"] > 1000  # KB
    [work] = seen["work"]
    assert (work["process"], work["queue"], work["jid"], work["class"]) == (
        identity,
        "py",
        jid,
        "ProcsPyBlock",
    )
    assert isinstance(work["run_at"], int)
    # ProcessSet.new pruned what it prunes (members with no <identity> hash): ours stayed.
    assert identity in seen["members"]

    with sidekiq_web(redis_server.url) as web, urllib.request.urlopen(f"{web.url}/busy", timeout=10) as got:
        page = got.read().decode()
    host = identity.split(":")[0]
    assert f"{host}:{pid}" in page and ">cogworker<" in page
    assert jid in page and "ProcsPyBlock" in page
    assert identity in r.smembers("processes")

    release(r, "a")
    wait_until(lambda: not r.exists(f"{identity}:workers"), message="the busy hash emptied")
    assert swarm.stop() == exitcodes.OK
    # A clean stop leaves nothing of it for Sidekiq to show (clear_heartbeat).
    assert not r.exists(identity, f"{identity}:workers") and identity not in r.smembers("processes")


def test_sidekiq_webs_quiet_and_stop_buttons_reach_a_swarm_child(
    swarms: SwarmRunner, r: redis.Redis, redis_server: RedisServer, stack: contextlib.ExitStack
) -> None:
    swarm = swarms.start(COGWORKER_QUEUES="py", **MODE)
    swarm.wait_ready()
    children = swarm.current_children()
    target_pid, other_pid = children[0], children[1]
    target = swarm.identities()[target_pid]
    web = stack.enter_context(sidekiq_web(redis_server.url))

    press(web, target, "quiet")
    wait_until(
        lambda: r.hget(target, "quiet") == "true" and r.hget(f"cogworker:process:{target}", "quiet") == "1",
        message="the child quiet, in Sidekiq's presence and in its own",
    )
    assert swarm.events("sidekiq_signal", signal="TSTP", command="quiet", pid=target_pid)
    for tag in ("q1", "q2"):
        push_python_job(r, tag, f"{tag:0<24}")
    wait_until(lambda: r.llen("procs:started") == 2, message="both jobs started")
    assert {line.split()[1] for line in r.lrange("procs:started", 0, -1)} == {str(other_pid)}
    for tag in ("q1", "q2"):
        release(r, tag)

    # Stop is cogworker's own remote stop: the child drains and exits 0, and its swarm fills the slot.
    press(web, target, "stop")
    [exited] = swarm.wait_event("child_exited", child_pid=target_pid)
    assert exited["exit_code"] == 0
    wait_until(
        lambda: len(swarm.current_children()) == 2 and target_pid not in swarm.current_children().values()
    )
    swarm.wait_ready(2)
    assert target not in r.smembers("processes") and not r.exists(target)
    assert len({p["identity"] for p in sidekiqs_view(redis_server.url)["procs"]}) == 2
    assert swarm.stop() == exitcodes.OK


def test_cogworker_shows_a_ruby_process_and_doctor_warns_on_a_queue_of_both(
    swarms: SwarmRunner,
    r: redis.Redis,
    redis_server: RedisServer,
    tmp_path: Path,
    cli: CLI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COGWORKER_SIDEKIQ_COMPAT", "6")
    settings = load_settings(redis_url=redis_server.url, sidekiq_compat="6")
    sidekiq = SidekiqProcess(
        redis_server.url,
        tmp_path / "sidekiq.log",
        app=PEER,
        queues=("rb", "shared"),
        threads=2,
        env=RUBY_JOBS,
    )
    with sidekiq:
        swarm = swarms.start(COGWORKER_COUNT="1", COGWORKER_QUEUES="py,shared", **MODE)
        jid = ruby(
            'puts Sidekiq::Client.push("class" => "ProcsRubyBlock", "queue" => "rb", "args" => ["r"])',
            redis_server.url,
            app=PEER,
            env=RUBY_JOBS,
        ).strip()
        swarm.wait_ready()

        def ruby_identity() -> str | None:
            found = [i for i in r.smembers("processes") if r.hexists(i, "info") and r.hlen(f"{i}:workers")]
            return found[0] if found else None

        identity = wait_until(
            ruby_identity, timeout=30, message=f"Sidekiq busy:\n{sidekiq.log_text()[-2000:]}"
        )

        status = cli("status", "--json").json()
        [listed] = [p for p in status["processes"] if p["identity"] == identity]
        assert (
            listed["language"] == "ruby"
            and listed["queues"] == ["rb", "shared"]
            and listed["concurrency"] == 2
        )
        assert listed["busy"] == 1 and listed["running"][0]["jid"] == jid
        assert listed["running"][0]["job"] == "ProcsRubyBlock"
        text = cli("status").out
        assert "LANGUAGE" in text and "rb,shared" in text and "ProcsRubyBlock" in text

        client = TestClient(create_app(settings))
        page = client.get("/busy").text
        row = page.split(f'<tr data-identity="{identity}"')[1].split("</tr>")[0]
        assert ">Ruby</span>" in row and "rb, shared" in row
        assert jid in page.split('<table id="running">')[1]
        assert ">1 Ruby</span>" in page

        checks = {c.name: c for c in doctor.run_checks(r, settings)}
        assert checks["queue languages"].level == "WARN"
        assert checks["queue languages"].details == ["shared: Ruby 1, Python 1 process(es)"]
        assert not any(d.startswith("rb:") for d in checks["unread queues"].details)
        assert "1 of them Sidekiq's" in checks["processes"].message

        told = cli("quiet", "--identity", identity)
        assert told.code == 0 and "Sidekiq's TSTP" in told.out
        wait_until(lambda: r.hget(identity, "quiet") == "true", timeout=20, message="Sidekiq to go quiet")
        release(r, "r")
        assert identity in r.smembers("processes")  # nothing of cogworker's pruned it
        assert swarm.stop() == exitcodes.OK
