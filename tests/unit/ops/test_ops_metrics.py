"""ops/metrics.py, the Metrics pages' reader, against minute hashes written in the workers' layout
(tests/support/metrics_data.py): percentiles from known run times, quiet minutes as zeros, damaged
data skipped with a note, deploy markers in range, sorting, and the finished-minute cache giving the
same figures as a full read."""

from __future__ import annotations

import json
import math
import time

import pytest
import redis

from cogworker.ops import metrics
from cogworker.ops import metrics_figures as figures
from cogworker.ops.metrics_cache import MinuteCache
from cogworker.store import metrics_layout as layout
from tests.support.metrics_data import ClassMinute, deploy_mark, write_minutes, write_queue_minutes

NOW = float(layout.minute_of(time.time()) * 60 + 30)  # half-way through the current minute
LAST = layout.minute_of(NOW)
HOUR = list(range(LAST - 59, LAST + 1))


def one_minute(durations: list[float], failed: int = 0) -> dict[int, ClassMinute]:
    return {LAST: ClassMinute(durations, failed)}


def by_name(found: figures.ClassRow) -> str:
    return found.name


def row(overview: metrics.Overview, name: str) -> figures.ClassRow:
    return next(found for found in overview.classes if found.name == name)


@pytest.mark.parametrize(("q", "exact"), [(0.5, 500.0), (0.95, 950.0), (0.99, 990.0)])
def test_percentiles_from_the_histogram_are_within_the_buckets_factor(
    r: redis.Redis, q: float, exact: float
) -> None:
    durations = [float(ms) for ms in range(1, 1001)]  # 1 ms to 1 s, evenly
    write_minutes(r, [LAST], {"app.Uniform": lambda m: ClassMinute(durations if m == LAST else [])})
    found = row(metrics.overview(r, 1, NOW), "app.Uniform").percentile(q)
    assert found is not None and not found.over
    assert 1 / 1.19 <= found.ms / exact <= 1.19, (q, found.ms)


def test_a_single_duration_is_placed_inside_its_own_bucket() -> None:
    histogram = [0] * figures.BUCKETS
    index = layout.bucket_of(100.0)
    histogram[index] = 40
    for q in figures.QUANTILES:
        found = figures.percentile(histogram, q)
        assert found is not None
        assert layout.BUCKET_BOUNDS_MS[index - 1] <= found.ms <= layout.BUCKET_BOUNDS_MS[index]
    assert figures.percentile([0] * figures.BUCKETS, 0.5) is None


def test_a_percentile_past_the_last_bound_says_so() -> None:
    histogram = [0] * figures.BUCKETS
    histogram[0] = 90
    histogram[-1] = 10  # runs longer than the last bound (about 70 minutes)
    p50 = figures.percentile(histogram, 0.5)
    assert p50 is not None and not p50.over and p50.ms <= layout.BUCKET_BOUNDS_MS[0]
    p99 = figures.percentile(histogram, 0.99)
    assert p99 is not None and p99.over and p99.ms == layout.BUCKET_BOUNDS_MS[-1]
    assert figures.format_percentile(p99).startswith("> ")
    assert figures.bucket_label(figures.BUCKETS - 1).startswith("> ")
    assert figures.bucket_label(3) == "≤ 2.8 ms"


def test_counts_failure_rate_total_time_and_throughput_over_the_range(r: redis.Redis) -> None:
    # 100 runs a minute, 1 of them failing, in 30 of the hour's 60 minutes.
    busy = set(HOUR[::2])
    write_minutes(r, HOUR, {"app.Mail": lambda m: ClassMinute([20.0] * 100 if m in busy else [], failed=1)})
    found = row(metrics.overview(r, 1, NOW), "app.Mail")
    assert (found.processed, found.failed, found.total_ms) == (3000, 30, 60_000)
    assert found.failure_rate == pytest.approx(0.01)
    assert found.throughput == pytest.approx(3000 / 60)  # quiet minutes count: a rate over the range
    assert found.mean_ms == pytest.approx(20.0)


def test_quiet_minutes_are_zeros_in_the_series_and_no_mean(r: redis.Redis) -> None:
    busy = {HOUR[10], HOUR[11], HOUR[40]}
    write_minutes(r, HOUR, {"app.Gappy": lambda m: ClassMinute([50.0, 150.0] if m in busy else [], failed=1)})
    detail = metrics.class_detail(r, "app.Gappy", 1, NOW)
    assert len(detail.processed) == 60
    assert [i for i, n in enumerate(detail.processed) if n] == [10, 11, 40]
    assert detail.processed[12] == 0 and detail.failed[12] == 0
    assert detail.mean_ms[12] is None and detail.mean_ms[10] == pytest.approx(100.0)
    assert detail.p95_ms[12] is None and detail.p95_ms[10] is not None
    assert sum(detail.row.histogram) == 6


def test_damaged_values_and_keys_are_skipped_with_a_note(r: redis.Redis) -> None:
    write_minutes(r, HOUR, {"app.Good": lambda m: ClassMinute([10.0, 12.0])})
    r.hset(layout.jobs_key(HOUR[5]), mapping={"app.Good|p": "lots", "app.Bad|f": "-3"})
    r.delete(layout.jobs_key(HOUR[6]))
    r.set(layout.jobs_key(HOUR[6]), "not a hash")
    r.zadd(layout.marks_key(), {"{not json": NOW - 60})
    overview = metrics.overview(r, 1, NOW)
    good = row(overview, "app.Good")
    assert good.processed == 2 * 58  # minute 5's count is text, minute 6 is no hash
    assert sum(good.histogram) == 2 * 59
    text = " ".join(overview.notes)
    assert layout.jobs_key(HOUR[5]) in text and "'app.Good|p'" in text
    assert layout.jobs_key(HOUR[6]) in text and "WRONGTYPE" in text
    assert layout.marks_key() in text
    detail = metrics.class_detail(r, "app.Good", 1, NOW)
    assert detail.processed[5] == 0 and detail.processed[6] == 0
    assert any(layout.jobs_key(HOUR[6]) in note for note in detail.notes)


def test_queue_latency_and_mean_wait_per_minute(r: redis.Redis) -> None:
    write_queue_minutes(r, HOUR, "mail", lambda m: 700 if m == HOUR[30] else 0)
    series = metrics.overview(r, 1, NOW).queues["mail"]
    assert series.latency_ms[30] == 700 and series.latency_ms[29] == 0
    assert series.mean_wait_ms[30] == pytest.approx(350.0)  # 10 jobs, 3,500 ms waited in all
    assert series.mean_wait_ms[29] is None and series.max_latency_ms == 700


def test_deploy_markers_inside_the_range_only(r: redis.Redis) -> None:
    deploy_mark(r, NOW - 600, "v1.2", by="ci")
    deploy_mark(r, NOW - 2 * 3600, "v1.1")
    found = metrics.overview(r, 1, NOW).marks
    assert [(m.label, m.by, m.at) for m in found] == [("v1.2", "ci", NOW - 600)]
    assert [m.label for m in metrics.overview(r, 4, NOW).marks] == ["v1.1", "v1.2"]


def test_sorting_by_any_column_puts_classes_without_runs_last() -> None:
    def make(name: str, processed: int, ms_bucket: int | None) -> figures.ClassRow:
        histogram = [0] * figures.BUCKETS
        if ms_bucket is not None:
            histogram[ms_bucket] = processed
        return figures.ClassRow(name, processed, processed // 10, processed * 5, 60, tuple(histogram))

    rows = [make("b", 50, 20), make("a", 500, 5), make("c", 0, None)]
    assert [x.name for x in figures.sort_rows(rows, "p95", True)] == ["b", "a", "c"]
    assert [x.name for x in figures.sort_rows(rows, "p95", False)] == ["a", "b", "c"]
    assert [x.name for x in figures.sort_rows(rows, "processed", True)] == ["a", "b", "c"]
    assert [x.name for x in figures.sort_rows(rows, "name", False)] == ["a", "b", "c"]
    assert [x.name for x in figures.sort_rows(rows, "nonsense", True)] == ["a", "b", "c"]


def test_ranges_are_one_four_or_eight_hours() -> None:
    assert [metrics.clamp_range(v) for v in ("1", "4", "8", "24", "x", "-1")] == [1, 4, 8, 1, 1, 1]
    win = metrics.window(8, NOW)
    assert len(win.minutes) == 480 and win.last == LAST and win.end_s > NOW


def test_the_cache_gives_the_figures_of_a_full_read_and_keeps_no_damaged_minute(r: redis.Redis) -> None:
    minutes = list(range(LAST - 479, LAST + 1))
    write_minutes(
        r,
        minutes,
        {f"app.C{i}": (lambda m, i=i: ClassMinute([1.0 + m % 7 * i, 30.0], failed=m % 2)) for i in range(5)},
    )
    r.hset(layout.jobs_key(minutes[100]), "app.C1|p", "oops")
    cache = MinuteCache()
    first = metrics.overview(r, 8, NOW, cache=cache)
    later = NOW + 120  # two minutes on: the window moved, new minutes written
    write_minutes(r, [LAST + 1, LAST + 2], {"app.C0": lambda m: ClassMinute([5.0] * 3)})
    cached = metrics.overview(r, 8, later, cache=cache)
    fresh = metrics.overview(r, 8, later)
    assert sorted(cached.classes, key=by_name) == sorted(fresh.classes, key=by_name)
    assert len(fresh.classes) == 5
    assert first.notes and cached.notes == fresh.notes  # the damaged minute is read (and noted) again
    for hours in (1, 4):
        assert sorted(metrics.overview(r, hours, later, cache=cache).classes, key=by_name) == sorted(
            metrics.overview(r, hours, later).classes, key=by_name
        )


def test_the_cache_reads_only_unfinished_minutes_the_second_time(r: redis.Redis) -> None:
    minutes = list(range(LAST - 479, LAST + 1))
    write_minutes(r, minutes, {"app.X": lambda m: ClassMinute([3.0])})
    cache = MinuteCache()
    metrics.overview(r, 8, NOW, cache=cache)
    before = r.info("commandstats").get("cmdstat_hgetall", {}).get("calls", 0)
    metrics.overview(r, 8, NOW, cache=cache)
    after = r.info("commandstats")["cmdstat_hgetall"]["calls"]
    job_reads = after - before - 480  # every minute's queue hash is read each time
    assert 0 < job_reads <= 2 * 60, job_reads
    assert math.isclose(row(metrics.overview(r, 8, NOW, cache=cache), "app.X").throughput, 1.0)


def test_marks_written_as_deploy_mark_writes_them(r: redis.Redis) -> None:
    r.zadd(layout.marks_key(), {json.dumps({"at": NOW - 5, "label": "v2 <b>", "by": "alice"}): NOW - 5})
    found = metrics.overview(r, 1, NOW).marks
    assert found == [metrics.Mark(at=NOW - 5, label="v2 <b>", by="alice")]


def test_a_class_page_with_the_cache_matches_a_full_read_and_reads_fewer_minutes(r: redis.Redis) -> None:
    minutes = list(range(LAST - 479, LAST + 1))
    write_minutes(r, minutes, {"app.Y": lambda m: ClassMinute([4.0, 90.0] if m % 4 else [], failed=m % 2)})
    r.hset(layout.jobs_key(minutes[50]), "app.Y|f", "x")  # damaged: read (and noted) every time
    cache = MinuteCache()
    metrics.class_detail(r, "app.Y", 8, NOW, cache=cache)
    before = r.info("commandstats")["cmdstat_hmget"]["calls"]
    later = NOW + 60
    write_minutes(r, [LAST + 1], {"app.Y": lambda m: ClassMinute([7.0])})
    cached = metrics.class_detail(r, "app.Y", 8, later, cache=cache)
    reads = r.info("commandstats")["cmdstat_hmget"]["calls"] - before
    fresh = metrics.class_detail(r, "app.Y", 8, later)
    assert 0 < reads <= 10, reads  # the unfinished minutes and the damaged one
    assert (cached.processed, cached.failed, cached.mean_ms, cached.p95_ms, cached.row) == (
        fresh.processed,
        fresh.failed,
        fresh.mean_ms,
        fresh.p95_ms,
        fresh.row,
    )
    assert cached.notes == fresh.notes and cached.notes
    assert (
        metrics.class_detail(r, "app.Y", 1, later, cache=cache).row
        == metrics.class_detail(r, "app.Y", 1, later).row
    )
