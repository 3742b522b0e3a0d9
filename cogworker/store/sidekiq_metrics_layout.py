"""Where Sidekiq 7's Metrics tab reads per-class job metrics, so a cogworker process in the mode can
write them for the Python jobs it ran (COGWORKER_SIDEKIQ_METRICS, worker/metrics/sidekiq_recorder.py).

The layout is Sidekiq 7.3's (lib/sidekiq/metrics/tracking.rb writes it, query.rb reads it; the facts
are kept with their sources in tests/unit/worker/metrics/sidekiq7_metrics_facts.json). Times are UTC;
minutes and hours in the counter key have no leading zero, the histogram key's day and hour have one:

- `j|<YYYYMMDD>|<H>:<M>`  hash per minute: `<class>|p` (runs ended, failed or not), `<class>|f` (of
  which failed) and `<class>|ms` (the run time of the runs that succeeded, whole milliseconds: Sidekiq
  leaves failed runs out, and its average divides by p - f). Expires 8 hours after its last write.
- `<class>-<DD>-<HH>:<M>`  string per class and minute, read as 26 unsigned 16-bit counters
  (BITFIELD u16 #0..#25, saturating): counter i holds the successful runs shorter than
  HISTOGRAM_BOUNDS_MS[i] and not shorter than the bound before; #25 the rest. Expires after 8 hours.

The keys are bare (Sidekiq 7 has no namespaces): they start with the shared start, "" in 7 mode.
"""

from __future__ import annotations

import bisect
import time

from cogworker.store import keys

TTL_S = 8 * 3600
# The upper bounds (exclusive) of Sidekiq 7's execution-time buckets, in milliseconds; a run as long
# as the last bound or longer is counted in one more bucket, index len(HISTOGRAM_BOUNDS_MS).
HISTOGRAM_BOUNDS_MS: tuple[int, ...] = (
    20, 30, 45, 65, 100, 150, 225, 335, 500, 750, 1100, 1700, 2500,
    3800, 5750, 8500, 13000, 20000, 30000, 45000, 65000, 100000, 150000, 225000, 335000,
)  # fmt: skip
BUCKETS = len(HISTOGRAM_BOUNDS_MS) + 1
# Sidekiq's reader splits each field at "|" and keeps the first two parts: a class name holding one
# would be read as another class, so it is written with "/" instead (as store/metrics_layout.py does).
SEPARATOR = "|"


def bucket_of(ms: float) -> int:
    """The histogram counter a successful run of `ms` milliseconds goes to."""
    return bisect.bisect_right(HISTOGRAM_BOUNDS_MS, ms)


def class_name(job_class: str) -> str:
    return job_class.replace(SEPARATOR, "/")


def counters_key(minute: int) -> str:
    """The counter hash of a minute (Unix time // 60)."""
    t = time.gmtime(minute * 60)
    return f"{keys.SHARED_PREFIX}j|{t.tm_year:04d}{t.tm_mon:02d}{t.tm_mday:02d}|{t.tm_hour}:{t.tm_min}"


def histogram_key(job_class: str, minute: int) -> str:
    """The histogram string of one class in one minute."""
    t = time.gmtime(minute * 60)
    return f"{keys.SHARED_PREFIX}{class_name(job_class)}-{t.tm_mday:02d}-{t.tm_hour:02d}:{t.tm_min}"


def field(job_class: str, metric: str) -> str:
    """`<class>|<metric>`, metric one of p, f, ms."""
    return f"{class_name(job_class)}{SEPARATOR}{metric}"


def expiry_of(minute: int) -> int:
    """When a minute's keys expire (epoch seconds): TTL_S after the minute ends, which is at most a
    minute past what Sidekiq's own flush of the same runs would set."""
    return (minute + 1) * 60 + TTL_S
