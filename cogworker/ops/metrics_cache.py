"""The job counts of finished minutes, kept by a long-lived reader (the Web UI) so a page reads from
Redis only the minutes still being written.

Eight hours of 50 classes is about 200,000 hash fields, and reading and parsing them all takes a few
hundred milliseconds; the Metrics page's budget is 100. A minute is final FINAL_AFTER_S after it ends:
workers flush every few seconds, and this leaves room for a worker whose clock is a few minutes
behind. Finished minutes are summed into whole-hour blocks as soon as an hour is complete, so the
cache holds at most 8 blocks and two hours of single minutes per Redis client, and the minutes of
the CLASSES_KEPT job classes whose pages were opened last (a few hundred kB). A minute with
damaged data is never kept, so its note comes back on every page until the damage is gone.

What it can't see: a count written into a minute after it was kept (a worker clock more than
FINAL_AFTER_S behind), or a minute deleted by hand; both last until the minute leaves the range.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from cogworker.store import metrics_layout as layout

FINAL_AFTER_S = 5 * layout.MINUTE_S
HOUR_MIN = 60
# A class page's minutes are kept for the classes looked at last (an operator follows a few).
CLASSES_KEPT = 16

Counts = dict[str, int]


class MinuteCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._minutes: dict[int, Counts] = {}
        self._hours: dict[int, Counts] = {}
        # job class -> minute -> its values (HMGET order); only minutes with runs are stored.
        self._classes: dict[str, dict[int, tuple[int, ...]]] = {}
        self._nothing: dict[int, tuple[int, ...]] = {}

    def plan(self, minutes: list[int], last_final: int) -> tuple[list[Counts], list[int]]:
        """For the window `minutes`: the counts already known (whole hours and single minutes)
        and the minutes left to read."""
        known: list[Counts] = []
        to_read: list[int] = []
        first, last = minutes[0], minutes[-1]
        with self._lock:
            for minute in minutes:
                hour = minute // HOUR_MIN
                whole_hour = hour * HOUR_MIN >= first and hour * HOUR_MIN + HOUR_MIN - 1 <= min(
                    last, last_final
                )
                if whole_hour and hour in self._hours:
                    if minute % HOUR_MIN == 0:
                        known.append(self._hours[hour])
                elif minute <= last_final and minute in self._minutes:
                    known.append(self._minutes[minute])
                else:
                    to_read.append(minute)
        return known, to_read

    def keep(self, read: Iterable[tuple[int, Counts]], last_final: int, oldest: int) -> None:
        """Keeps the finished minutes just read (clean ones only), folds complete hours into
        blocks, and forgets what is older than `oldest`."""
        with self._lock:
            for minute, counts in read:
                if minute <= last_final:
                    self._minutes[minute] = counts
            for hour in {m // HOUR_MIN for m in self._minutes}:
                block = [self._minutes.get(hour * HOUR_MIN + i) for i in range(HOUR_MIN)]
                if all(b is not None for b in block) and (hour + 1) * HOUR_MIN - 1 <= last_final:
                    self._hours[hour] = summed(b for b in block if b is not None)
                    for i in range(HOUR_MIN):
                        del self._minutes[hour * HOUR_MIN + i]
            for minute in [m for m in self._minutes if m < oldest]:
                del self._minutes[minute]
            for hour in [h for h in self._hours if (h + 1) * HOUR_MIN <= oldest]:
                del self._hours[hour]

    def class_minutes(
        self, job_class: str, minutes: list[int], last_final: int
    ) -> dict[int, tuple[int, ...]]:
        """The finished minutes of `minutes` kept for `job_class`."""
        with self._lock:
            kept = self._classes.pop(job_class, None)
            if kept is None:
                return {}
            self._classes[job_class] = kept  # now the most recently used
            return {m: kept[m] for m in minutes if m <= last_final and m in kept}

    def keep_class(self, job_class: str, read: dict[int, tuple[int, ...]], oldest: int) -> None:
        """Keeps a class's finished minutes just read (a quiet one as a shared tuple of zeros),
        forgets its minutes before `oldest`, and the classes looked at longest ago."""
        with self._lock:
            kept = {m: v for m, v in self._classes.pop(job_class, {}).items() if m >= oldest}
            for minute, values in read.items():
                if minute >= oldest:
                    kept[minute] = values if any(values) else self._zeros(len(values))
            self._classes[job_class] = kept
            while len(self._classes) > CLASSES_KEPT:
                del self._classes[next(iter(self._classes))]

    def _zeros(self, size: int) -> tuple[int, ...]:
        return self._nothing.setdefault(size, (0,) * size)


def summed(parts: Iterable[Counts]) -> Counts:
    total: Counts = {}
    get = total.get
    for part in parts:
        for name, value in part.items():
            total[name] = get(name, 0) + value
    return total


def last_final_minute(now_s: float) -> int:
    return layout.minute_of(now_s - FINAL_AFTER_S) - 1
