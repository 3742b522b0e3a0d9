"""COGWORKER_SIDEKIQ_METRICS: the keys Sidekiq 7's Metrics tab reads, written by the metrics flush for
Python jobs, checked against facts read from Sidekiq 7.3.9's source (sidekiq7_metrics_facts.json) and
read back by a simulation of that tab's reader built from those facts alone."""

from __future__ import annotations

import calendar
import json
import shutil
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from cogworker.settings import ConfigError, Settings, load_settings
from cogworker.store import keys, shards
from cogworker.store import metrics_layout as layout
from cogworker.store import sidekiq_metrics_layout as sk
from cogworker.store.redis_context import RedisContext
from cogworker.worker.metrics.flusher import Flusher
from cogworker.worker.metrics.recorder import Recorder
from cogworker.worker.metrics.sidekiq_recorder import SidekiqRecorder, new_recorder

FACTS: dict[str, Any] = json.loads((Path(__file__).parent / "sidekiq7_metrics_facts.json").read_text())
NOW = 1_800_000_030.0  # 30 s into its minute
MINUTE = layout.minute_of(NOW)


def epoch_of(iso: str) -> float:
    return float(calendar.timegm(time.strptime(iso, "%Y-%m-%dT%H:%M:%SZ")))


@pytest.fixture
def mode7(settings: Settings) -> Iterator[Settings]:
    seven = settings.model_copy(update={"sidekiq_compat": "7", "sidekiq_metrics": True})
    shards.use_settings(seven)
    yield seven
    shards.use_settings(settings)


def flush(settings: Settings, recorder: Recorder, seq: int = 1) -> Any:
    flusher = Flusher(
        RedisContext.build(settings), "host:1:abc", recorder, queues=(), interval_s=60, clock=lambda: NOW
    )
    return flusher._send(seq, recorder.take())


def test_the_key_formats_bounds_and_ttls_are_sidekiqs(mode7: Settings) -> None:
    for iso, expected in FACTS["counters"]["key_examples"].items():
        assert sk.counters_key(layout.minute_of(epoch_of(iso))) == expected
    for iso, expected in FACTS["histogram"]["key_examples"].items():
        assert sk.histogram_key("HardWorker", layout.minute_of(epoch_of(iso))) == expected
    assert list(sk.HISTOGRAM_BOUNDS_MS) == FACTS["histogram"]["bounds_ms"]
    assert FACTS["histogram"]["counters"] == sk.BUCKETS
    assert sk.TTL_S == FACTS["counters"]["ttl_s"] == FACTS["histogram"]["ttl_s"]
    # "the first index whose bound is greater than the run's ms"
    assert [sk.bucket_of(ms) for ms in (0, 19.9, 20, 29, 334_999, 335_000, 10**9)] == [0, 0, 1, 1, 24, 25, 25]


def test_rubys_strftime_of_the_facts_formats_gives_our_keys(mode7: Settings) -> None:
    """The formats are Ruby strftime's, whose `%-H` Python's time.strftime doesn't portably have: Ruby
    itself formats a few awkward times (midnight, single digits, a month's end)."""
    stamps = [
        epoch_of(iso) for iso in ("2026-12-04T03:07:00Z", "2027-01-09T00:00:00Z", "2026-02-28T23:59:30Z")
    ]
    script = (
        "ARGV.each { |s| t = Time.at(s.to_i).utc; "
        f"puts t.strftime({FACTS['counters']['key_strftime']!r}) + ' ' + t.strftime('%d-%H:%-M') }}"
    )
    ruby = shutil.which("ruby")
    assert ruby, "no `ruby` on PATH: run `make test` (deploy/ensure-sidekiq.sh installs it)"
    done = subprocess.run(
        [ruby, "-e", script, *(str(int(s)) for s in stamps)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    ours = [
        f"{sk.counters_key(layout.minute_of(s))} {sk.histogram_key('', layout.minute_of(s))[1:]}"
        for s in stamps
    ]
    assert done.stdout.split("\n")[:-1] == ours


class SidekiqQuery:
    """Sidekiq 7's Metrics tab reader, rebuilt from the facts only: the last `minutes` minute hashes
    read whole (top jobs) or for one class with its histograms (one job's page)."""

    def __init__(self, r: redis.Redis, now: float) -> None:
        self.r = r
        self.minutes = [layout.minute_of(now) - i for i in range(FACTS["counters"]["reader_window_minutes"])]

    def top_jobs(self) -> dict[str, dict[str, int]]:
        totals: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for minute in self.minutes:
            for raw, value in self.r.hgetall(sk.counters_key(minute)).items():
                klass, metric = raw.split("|")[:2]
                totals[klass][metric] += int(value)
        return totals

    def histogram(self, klass: str) -> list[int]:
        summed = [0] * FACTS["histogram"]["counters"]
        for minute in self.minutes:
            fetch: list[Any] = []
            for index in range(FACTS["histogram"]["counters"]):
                fetch += ["GET", FACTS["histogram"]["counter_type"], f"#{index}"]
            values = self.r.execute_command("BITFIELD_RO", sk.histogram_key(klass, minute), *fetch)
            summed = [a + int(b or 0) for a, b in zip(summed, values, strict=True)]
        return summed


def average_ms(totals: dict[str, int]) -> float:
    completed = totals["p"] - totals["f"]
    return 0.0 if completed == 0 else totals["ms"] / completed


def test_a_flush_writes_what_the_metrics_tab_reads(mode7: Settings, r: redis.Redis) -> None:
    recorder = new_recorder(mode7)
    assert isinstance(recorder, SidekiqRecorder)
    for ms in (5.0, 25.0, 25.0, 400_000.0):
        recorder.ended("HardPython", ms / 1000, False, NOW)
    recorder.ended("HardPython", 9.0, True, NOW)  # failed: p and f, no time, no histogram
    recorder.ended("HardPython", 0.0101, False, NOW - 120)  # two minutes before
    recorder.ended("app.jobs|odd", 0.001, False, NOW)
    assert flush(mode7, recorder) == [1]

    query = SidekiqQuery(r, NOW)
    top = query.top_jobs()
    assert top["HardPython"] == {"p": 6, "f": 1, "ms": 5 + 25 + 25 + 400_000 + 10}
    assert average_ms(top["HardPython"]) == pytest.approx((400_055 + 10) / 5)
    assert top["app.jobs/odd"] == {"p": 1, "ms": 1}  # "|" would split the class in two
    histogram = query.histogram("HardPython")
    assert histogram[0] == 2 and histogram[1] == 2 and histogram[25] == 1 and sum(histogram) == 5
    # Bare keys (7 has no namespace) with Sidekiq's TTL, beside cogworker's own metrics.
    key = sk.counters_key(MINUTE)
    assert not key.startswith(keys.PREFIX)
    assert 0 < r.ttl(key) <= FACTS["counters"]["ttl_s"] + 60
    assert 0 < r.ttl(sk.histogram_key("HardPython", MINUTE)) <= FACTS["histogram"]["ttl_s"] + 60
    assert r.hget(layout.jobs_key(MINUTE), "HardPython|p") == "5"


def test_a_resend_after_a_lost_reply_counts_nothing_twice(mode7: Settings, r: redis.Redis) -> None:
    recorder = SidekiqRecorder()
    recorder.ended("HardPython", 0.05, False, NOW)
    flusher = Flusher(
        RedisContext.build(mode7),
        "host:1:abc",
        recorder,
        queues=("default",),
        interval_s=60,
        clock=lambda: NOW,
    )
    batch = recorder.take()
    assert flusher._send(1, batch) == [1]
    assert flusher._send(1, batch) == [0]
    assert r.hgetall(sk.counters_key(MINUTE)) == {"HardPython|p": "1", "HardPython|ms": "50"}
    assert SidekiqQuery(r, NOW).histogram("HardPython")[sk.bucket_of(50)] == 1


def test_counters_saturate_as_sidekiqs_do(mode7: Settings, r: redis.Redis) -> None:
    recorder = SidekiqRecorder()
    for _ in range(3):
        recorder.ended("HardPython", 0.001, False, NOW)
    r.execute_command("BITFIELD", sk.histogram_key("HardPython", MINUTE), "SET", "u16", "#0", 65534)
    assert flush(mode7, recorder) == [1]
    assert SidekiqQuery(r, NOW).histogram("HardPython")[0] == 65535


def test_a_wrong_type_sidekiq_key_is_skipped_and_never_sent_to_the_key_guard(
    mode7: Settings, r: redis.Redis
) -> None:
    recorder = SidekiqRecorder()
    recorder.ended("HardPython", 0.001, False, NOW)
    r.rpush(sk.histogram_key("HardPython", MINUTE), "not ours")
    flusher = Flusher(
        RedisContext.build(mode7), "host:1:abc", recorder, queues=(), interval_s=60, clock=lambda: NOW
    )
    assert flusher.flush()
    assert r.hget(sk.counters_key(MINUTE), "HardPython|p") == "1"
    assert r.lrange(sk.histogram_key("HardPython", MINUTE), 0, -1) == ["not ours"]
    assert r.smembers(keys.GUARD_REQUESTS) == set()


def test_without_the_setting_nothing_of_sidekiqs_is_written(settings: Settings, r: redis.Redis) -> None:
    recorder = new_recorder(settings)
    assert type(recorder) is Recorder
    assert new_recorder(settings.model_copy(update={"metrics": False})) is None
    recorder.ended("HardPython", 0.05, False, NOW)
    assert flush(settings, recorder) == [1]
    assert [k for k in r.keys("*") if not k.startswith(keys.PREFIX)] == []


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"COGWORKER_SIDEKIQ_METRICS": "true"}, "set COGWORKER_SIDEKIQ_COMPAT=7 with it"),
        ({"COGWORKER_SIDEKIQ_METRICS": "true", "COGWORKER_SIDEKIQ_COMPAT": "6"}, "Sidekiq 6 has no such tab"),
        (
            {
                "COGWORKER_SIDEKIQ_METRICS": "true",
                "COGWORKER_SIDEKIQ_COMPAT": "7",
                "COGWORKER_METRICS": "false",
            },
            "needs COGWORKER_METRICS=on",
        ),
    ],
)
def test_the_setting_is_refused_outside_7_mode(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], said: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=said):
        load_settings()


def test_the_setting_is_taken_in_7_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COGWORKER_SIDEKIQ_COMPAT", "7")
    monkeypatch.setenv("COGWORKER_SIDEKIQ_METRICS", "true")
    assert load_settings().sidekiq_metrics is True
