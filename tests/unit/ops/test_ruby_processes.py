"""Readers of the shared `processes` set in the Sidekiq mode: a Ruby member (a Sidekiq presence hash,
no cogworker one) is listed marked as Ruby, told with Sidekiq's own signals, counted by the summary
bar and the doctor, and never pruned; one of cogworker's own that died is not taken for one. The end-to-
end tests against a real Sidekiq are in tests/e2e/sidekiq/test_sidekiq_procs.py."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
import redis
from starlette.testclient import TestClient

from cogworker.ops import OpsError, doctor, doctor_languages
from cogworker.ops import processes as process_ops
from cogworker.settings import Settings, load_settings
from cogworker.store import keys, shards
from cogworker.web import create_app, summary
from tests.support import components
from tests.support.redis_server import RedisServer

RUBY = "rubyhost:77:0f1e2d3c4b5a"
OURS = "pyhost:88:aabbccddeeff"


@pytest.fixture(autouse=True)
def _back_to_default() -> Iterator[None]:
    yield
    shards.use_settings(load_settings())


@pytest.fixture
def mode(redis_server: RedisServer) -> Settings:
    settings = load_settings(redis_url=redis_server.url, sidekiq_compat="6")
    shards.use_settings(settings)
    return settings


def ruby_presence(
    r: redis.Redis, identity: str = RUBY, queues: tuple[str, ...] = ("mailers",), **info: object
) -> None:
    """A process as Sidekiq 6.4's launcher writes it (launcher.rb `❤`), one job running (processor.rb
    `stats`: the payload as the raw job string)."""
    data = {
        "hostname": "rubyhost",
        "started_at": time.time() - 30,
        "pid": 77,
        "tag": "app",
        "concurrency": 5,
        "queues": list(queues),
        "labels": [],
        "identity": identity,
        **info,
    }
    r.sadd("processes", identity)
    r.hset(
        identity,
        mapping={
            "info": json.dumps(data),
            "busy": 1,
            "beat": time.time(),
            "quiet": "false",
            "rss": 2048,
            "rtt_us": 300,
        },
    )
    job = json.dumps({"class": "MailJob", "jid": "b" * 24, "args": ["hi"], "queue": "mailers"})
    r.hset(
        f"{identity}:workers",
        "owh3",
        json.dumps({"queue": "mailers", "payload": job, "run_at": int(time.time())}),
    )


def python_presence(r: redis.Redis, queues: tuple[str, ...] = ("default",)) -> None:
    info = {"hostname": "pyhost", "pid": 88, "concurrency": 2, "queues": list(queues)}
    r.hset(keys.process(OURS), mapping={"info": json.dumps(info), "busy": 0, "beat": 1, "quiet": "0"})
    r.sadd(keys.PROCESSES, OURS)


def test_a_ruby_process_is_listed_marked_with_its_queues_and_running_job(
    r: redis.Redis, mode: Settings
) -> None:
    ruby_presence(r)
    python_presence(r)
    live = {p.identity: p for p in process_ops.processes(r)}
    ruby = live[RUBY]
    assert ruby.is_ruby and not live[OURS].is_ruby
    assert (ruby.hostname, ruby.pid, ruby.tag, ruby.queues, ruby.concurrency, ruby.busy) == (
        "rubyhost",
        77,
        "app",
        ["mailers"],
        5,
        1,
    )
    assert ruby.rss_bytes == 2048 * 1024 and not ruby.quiet and ruby.beat_age_s is not None
    [job] = ruby.running
    assert (job.thread, job.queue, job.job, job.jid, job.args) == (
        "owh3",
        "mailers",
        "MailJob",
        "b" * 24,
        ["hi"],
    )
    assert process_ops.queue_readers(live.values())["mailers"].fetching == 1


def test_a_dead_cogworker_process_is_not_taken_for_a_ruby_one(r: redis.Redis, mode: Settings) -> None:
    ruby_presence(r, OURS, labels=["cogworker"])  # our Sidekiq presence, outliving our own
    assert process_ops.processes(r) == []


def test_ruby_processes_get_sidekiqs_signals_and_are_left_out_of_every(
    r: redis.Redis, mode: Settings
) -> None:
    ruby_presence(r)
    python_presence(r)
    assert [p.identity for p in process_ops.tell(r, "quiet", [RUBY])] == [RUBY]
    assert [p.identity for p in process_ops.tell(r, "stop", [RUBY, OURS])] == [RUBY, OURS]
    assert r.lrange(f"{RUBY}-signals", 0, -1) == ["TERM", "TSTP"]
    assert 0 < r.ttl(f"{RUBY}-signals") <= 60
    assert r.lrange(keys.signals(OURS), 0, -1) == ["stop"]
    with pytest.raises(OpsError, match="can't resume"):
        process_ops.tell(r, "resume", [RUBY])
    assert [p.identity for p in process_ops.tell(r, "quiet", None)] == [OURS]
    assert r.llen(f"{RUBY}-signals") == 2


def test_recovery_never_prunes_a_ruby_member_and_prunes_ours(r: redis.Redis, mode: Settings) -> None:
    recovery = components.build(mode).recovery
    ruby_presence(r)
    ruby_presence(r, OURS, labels=["cogworker"])
    for identity in (RUBY, OURS):
        r.sadd(keys.IN_PROGRESS_IDENTITIES, identity)
    assert recovery.recover_orphans(scan=True) == 0
    assert r.smembers("processes") == {RUBY}
    assert r.exists(RUBY) and not r.exists(OURS, f"{OURS}:workers")
    assert process_ops.orphaned_lists(r) == []


def test_the_summary_bar_counts_ruby_processes(r: redis.Redis, mode: Settings) -> None:
    ruby_presence(r)
    python_presence(r)
    ruby_presence(r, "gone:1:1", labels=["cogworker"])
    found = summary.read(r)
    assert (found.processes, found.ruby, found.busy, found.slots) == (2, 1, 1, 7)
    text = TestClient(create_app(mode)).get("/busy").text
    assert '<span class="badge ruby" data-figure="ruby">1 Ruby</span>' in text
    row = text.split(f'<tr data-identity="{RUBY}"')[1].split("</tr>")[0]
    assert ">Ruby</span>" in row and "rubyhost" in row and "mailers" in row and "Resume" not in row
    running = text.split('<table id="running">')[1]
    assert "MailJob" in running and ">Ruby</span>" in running


def test_doctor_counts_ruby_readers_and_warns_on_a_queue_of_both_languages(
    r: redis.Redis, mode: Settings
) -> None:
    ruby_presence(r, queues=("mailers", "default"))
    python_presence(r, queues=("default",))
    r.sadd(keys.QUEUES, "mailers")
    r.lpush(keys.queue("mailers"), "{}")
    unread = doctor.check_unread_queues(r, mode)
    assert "mailers" not in " ".join(unread.details)
    check = doctor_languages.check_queue_languages(r, mode)
    assert check.level == "WARN" and check.details == ["default: Ruby 1, Python 1 process(es)"]
    processes = doctor.check_processes(r, mode)
    assert "1 of them Sidekiq's" in processes.message
    assert processes.details == [f"Ruby rubyhost pid 77 ({RUBY}): 1/5 busy, queues mailers, default"]
    assert "queue languages" in [c.name for c in doctor.run_checks(r, mode)]


def test_with_the_mode_off_nothing_reads_sidekiqs_keys(r: redis.Redis, settings: Settings) -> None:
    shards.use_settings(settings)
    ruby_presence(r)
    r.sadd(keys.PROCESSES, RUBY)
    assert process_ops.processes(r) == []
    assert summary.read(r).processes == 0
    assert "queue languages" not in [c.name for c in doctor.run_checks(r, settings)]
