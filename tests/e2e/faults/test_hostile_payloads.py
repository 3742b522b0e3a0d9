"""Payloads that aren't valid UTF-8, written by something other than cogworker (pushed with a bytes
client): a worker files them in dead and goes on; every reader (poller, recovery, the CLI listings,
`cogworker status`, doctor, the metrics scrape) shows them escaped instead of crashing."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from cogworker import codec
from cogworker.ops import sets as set_ops
from cogworker.settings import load_settings
from cogworker.store import keys
from supervisor.integrations.metrics import SwarmMetrics
from tests.support import components
from tests.support import metrics as scraped
from tests.support.cli_runner import CLI, cli_fixture  # noqa: F401
from tests.support.daemon_env import clean_env
from tests.support.redis_server import RedisServer, free_port, wait_until
from tests.support.workers import WorkerPool

# Valid JSON around a string that isn't UTF-8, and bytes that aren't anything.
BAD_JOB = b'{"class":"demo_jobs.record","args":["caf\xe9"],"kwargs":{},"jid":"badjid","queue":"default"}'
BAD_GARBAGE = b"\xff\xfe\x00garbage"
NOT_UTF8 = "payload is not valid UTF-8"
FAST = {"COGWORKER_POLL_INTERVAL_S": "0.1"}


@pytest.fixture
def rb(redis_server: RedisServer, r: redis.Redis) -> Iterator[redis.Redis]:
    """A client that writes and reads bytes as they are (the session's Redis, flushed by `r`)."""
    client = redis.Redis(host="127.0.0.1", port=redis_server.port, socket_timeout=5)
    try:
        yield client
    finally:
        client.close()


def dead_entries(r: redis.Redis) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in r.zrange(keys.DEAD, 0, -1)]


def unreadable_entries(r: redis.Redis) -> dict[bytes, dict[str, Any]]:
    """Dead entries for non-UTF-8 payloads, by the original bytes they keep."""
    return {
        base64.b64decode(e["raw_base64"]): e for e in dead_entries(r) if e.get("error_message") == NOT_UTF8
    }


def assert_nothing_in_progress(r: redis.Redis) -> None:
    assert [k for k in r.keys("cogworker:inprogress:*") if r.llen(k)] == []


def test_a_worker_files_non_utf8_payloads_in_dead_and_runs_the_rest_of_the_batch(
    r: redis.Redis, rb: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    import demo_jobs

    demo_jobs.record.perform_async("first")
    rb.lpush(keys.queue("default"), BAD_JOB)
    demo_jobs.record.perform_async("middle")
    rb.lpush(keys.queue("default"), BAD_GARBAGE)
    demo_jobs.record.perform_async("last")
    worker = workers.start()  # one fetch takes all five: the batch is what used to strand
    wait_until(lambda: r.llen("test:ran") == 3, timeout=15, message="the three good jobs")
    wait_until(lambda: len(unreadable_entries(r)) == 2, timeout=15, message="both bad payloads in dead")
    found = unreadable_entries(r)
    assert set(found) == {BAD_JOB, BAD_GARBAGE}  # the original bytes, exactly
    assert "caf\\xe9" in found[BAD_JOB]["raw"]  # and visibly, escaped
    assert found[BAD_GARBAGE]["raw"].startswith("\\xff\\xfe")
    assert all(e["error_class"] == "cogworker.UnreadablePayload" for e in found.values())
    # Now idle, blocked on the queue (BLMOVE): the other way a job is fetched.
    rb.lpush(keys.queue("default"), b"\xc3\x28 idle")
    demo_jobs.record.perform_async("after-idle")
    wait_until(lambda: r.llen("test:ran") == 4, timeout=15, message="the job after the idle one")
    wait_until(lambda: len(unreadable_entries(r)) == 3, timeout=15, message="the idle one in dead")
    wait_until(lambda: r.get("cogworker:stat:processed") == "4", timeout=10, message="acks")
    assert_nothing_in_progress(r)
    assert worker.stop() == 0
    assert worker.events_named("job_thread_error") == []
    assert worker.events_named("redis_command_failed") == []
    assert r.llen(keys.queue("default")) == 0  # nothing was requeued at stop either


def test_non_utf8_entries_in_the_retry_and_schedule_sets_go_to_dead(
    r: redis.Redis, rb: redis.Redis, configured: object, workers: WorkerPool
) -> None:
    import demo_jobs

    rb.zadd(keys.RETRY, {BAD_JOB: 0})
    rb.zadd(keys.SCHEDULE, {BAD_GARBAGE: 0})
    demo_jobs.record.perform_in(0.01, "scheduled-behind")
    worker = workers.start(**FAST)
    wait_until(lambda: r.llen("test:ran") == 1, timeout=15, message="the good scheduled job")
    wait_until(lambda: r.zcard(keys.DEAD) == 2, timeout=15, message="both bad entries in dead")
    kept = {base64.b64decode(e["raw_base64"]) for e in dead_entries(r)}
    assert kept == {BAD_JOB, BAD_GARBAGE}
    assert all("not valid UTF-8" in e["error_message"] for e in dead_entries(r))
    assert r.zcard(keys.RETRY) == 0 and r.zcard(keys.SCHEDULE) == 0
    assert worker.stop() == 0
    assert worker.events_named("redis_command_failed") == []


def test_recovery_requeues_and_buries_non_utf8_jobs_of_a_dead_process(
    r: redis.Redis, rb: redis.Redis, settings: Any
) -> None:
    parts = components.build(settings, identity="me:1:x")
    owner, pill_owner = "gone:2:y", "gone:3:z"
    pill = b'{"class":"demo_jobs.record","args":["caf\xe9"],"jid":"pill","queue":"default"}'
    rb.lpush(keys.in_progress(owner), BAD_GARBAGE)
    # Alone on its dead process's list: a death shared with another job convicts nobody.
    rb.lpush(keys.in_progress(pill_owner), pill)
    r.sadd(keys.IN_PROGRESS_IDENTITIES, owner, pill_owner)
    # Its process already died running it as often as allowed: this orphaning makes it a poison pill.
    r.set(keys.orphanings("pill"), settings.max_orphanings)
    parts.recovery.recover_orphans(scan=True)
    assert r.llen(keys.in_progress(owner)) == 0 and r.llen(keys.in_progress(pill_owner)) == 0
    assert parts.recovery.pending_burials == 0
    assert not parts.outages.down
    assert rb.lrange(keys.queue("default"), 0, -1) == [BAD_GARBAGE]
    [entry] = dead_entries(r)
    assert entry["error_class"] == "cogworker.ProcessDied"
    assert base64.b64decode(entry["raw_base64"]) == pill
    assert "\\xe9" in entry["raw"]


def seed_everywhere(rb: redis.Redis) -> None:
    rb.lpush(keys.queue("default"), BAD_JOB)
    rb.lpush(keys.queue("default"), BAD_GARBAGE)  # the oldest: what latency reads
    rb.sadd(keys.QUEUES, b"default", b"q\xff")
    rb.lpush(b"cogworker:queue:q\xff", BAD_JOB)
    rb.zadd(keys.RETRY, {BAD_JOB: 100})
    rb.zadd(keys.SCHEDULE, {BAD_GARBAGE: 100})
    rb.zadd(keys.DEAD, {BAD_JOB: 100, BAD_GARBAGE: 200})


@pytest.mark.parametrize("verb", ["retry", "scheduled", "dead"])
def test_set_listings_show_non_utf8_entries_escaped(cli: CLI, rb: redis.Redis, verb: str) -> None:
    seed_everywhere(rb)
    listing = cli(verb, "list")
    assert listing.code == 0, listing.err
    assert "(unreadable)" in listing.out
    data = cli(verb, "list", "--json")
    assert data.code == 0, data.err
    refs = [e["ref"] for e in data.json()["entries"]]
    assert refs and all(ref.startswith("raw-") for ref in refs)
    shown = cli(verb, "show", refs[0])
    assert shown.code == 0, shown.err
    assert "\\x" in shown.out
    shown_json = cli(verb, "show", refs[0], "--json")
    assert shown_json.code == 0 and "\\x" in shown_json.json()["raw"]
    deleted = cli(verb, "delete", refs[0], "--yes")
    assert deleted.code == 0, deleted.err
    assert rb.zcard(set_ops.set_key(verb)) == (1 if verb == "dead" else 0)


def test_status_queues_and_doctor_exit_0_with_non_utf8_data(cli: CLI, rb: redis.Redis) -> None:
    seed_everywhere(rb)
    for argv in (("status",), ("status", "--json"), ("queues",), ("queues", "--json"), ("doctor",)):
        result = cli(*argv)
        assert result.code in (0, 1) if argv[0] == "doctor" else result.code == 0, (argv, result.err)
        assert "Traceback" not in result.err
    lines = cli("queues").out.splitlines()
    [row] = [line for line in lines if line.startswith("q\\xff")]
    assert row.index("1") == lines[0].index("SIZE")  # columns measured on the escaped text
    names = {q["name"] for q in cli("queues", "--json").json()}
    assert {"default", "q\\xff"} <= names


def test_cogworker_status_as_a_command_with_non_utf8_data(redis_server: RedisServer, rb: redis.Redis) -> None:
    seed_everywhere(rb)
    env = clean_env(COGWORKER_REDIS_URL=redis_server.url, LC_ALL="C.UTF-8", PYTHONIOENCODING="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "cogworker", "status"], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert "q\\xff" in done.stdout


def test_the_metrics_scrape_reports_with_non_utf8_data(redis_server: RedisServer, rb: redis.Redis) -> None:
    seed_everywhere(rb)
    metrics = SwarmMetrics(load_settings(redis_url=redis_server.url, metrics_port=free_port()))
    metrics.start()
    try:
        assert metrics.port is not None
        samples = scraped.parse(scraped.scrape_text(metrics.port))
    finally:
        metrics.stop()
    assert samples[("cogworker_redis_up", ())] == 1
    assert samples[("cogworker_queue_size", (("queue", "default"),))] == 2
    assert samples[("cogworker_queue_size", (("queue", "q\\xff"),))] == 1
    assert samples[("cogworker_set_size", (("set", "dead"),))] == 2


def test_codec_escape_shows_invalid_bytes_and_other_surrogates() -> None:
    assert codec.escape("plain") == "plain"
    assert codec.escape(BAD_GARBAGE.decode("utf-8", "surrogateescape")) == "\\xff\\xfe\x00garbage"
    assert codec.escape("a\ud800b") == "a\\ud800b"
    assert not codec.is_utf8("a\udcffb") and codec.is_utf8("é")


def test_a_push_names_the_argument_json_cant_carry(configured: object) -> None:
    import demo_jobs

    deep: list[Any] = []
    for _ in range(300):
        deep = [deep]
    with pytest.raises(TypeError, match=r"args\[0\]: a string with a lone surrogate"):
        demo_jobs.record.perform_async("caf\udce9")
    with pytest.raises(TypeError, match=r"kwargs\['tag'\]\[0\]+.*nested more than 252 levels"):
        demo_jobs.record.perform_async(tag=deep)


def test_a_status_message_with_a_lone_surrogate_is_sent_escaped() -> None:
    from cogworker.worker.supervisor_events import Reporter

    read_end, write_end = os.pipe()
    try:
        Reporter(write_end).send("boot_error", error="can't import /srv/caf\udce9/app.py")
        line = os.read(read_end, 1000)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert json.loads(line) == {"event": "boot_error", "error": "can't import /srv/caf\\xe9/app.py"}


def test_text_read_from_non_utf8_bytes_is_sent_back_as_the_same_bytes(settings: Any, rb: redis.Redis) -> None:
    from cogworker.store.connection import connect
    from cogworker.store.direct_connection import DirectConnection

    client = connect(settings)  # hiredis encodes text strictly: the client must still send these back
    rb.rpush("l", BAD_GARBAGE, BAD_JOB, b"ok")
    garbage, job, _ = client.lrange("l", 0, -1)
    assert garbage == BAD_GARBAGE.decode("utf-8", "surrogateescape")
    assert client.lrem("l", 1, garbage) == 1
    pipe = client.pipeline(transaction=False)
    pipe.lrem("l", 1, job)
    assert pipe.execute() == [1]
    rb.rpush("l", BAD_GARBAGE)
    direct = DirectConnection(client)
    try:
        assert direct.call("LREM", "l", 1, garbage) == 1
    finally:
        direct.close()
    assert rb.lrange("l", 0, -1) == [b"ok"]


def test_a_log_line_with_a_lone_surrogate_is_written_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    import structlog

    from cogworker import logs

    logs.configure("info", "json")
    structlog.get_logger("test").error("odd_text", text="caf\udce9", nested={"k": ["\ud800"]})
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert (line["text"], line["nested"]) == ("caf\\xe9", {"k": ["\\ud800"]})
