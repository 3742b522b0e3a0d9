"""Which queue partition each fetched job came from, in the sharded layout (store/shards.py).

A job's acknowledgement and its filing must go to its partition's slot: the in-progress list it sits on
and the retry/dead/schedule sets it is filed in are that partition's. The settler speaks in payloads
(`ack(raw, jid)`, `file(raw, filing)`), as the processor hands it what it ran, so the fetcher notes here
each copy it hands out, and the settler and the ack sender look it up by payload.

Copies of one payload are kept in fetch order, a list per payload: two identical payloads (the same jid
pushed twice) are settled oldest first, as fetch.lua's LREM takes the oldest entry.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable

from cogworker.store.shards import Partition
from cogworker.worker.fetching.fetch import Work


class Placements:
    """Payload -> the partitions of the copies fetched and not settled yet; thread-safe (job threads
    settle while the fetcher thread adds and sends acknowledgements)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._of: dict[str, list[Partition]] = {}

    def add(self, works: Iterable[Work]) -> None:
        with self._lock:
            for work in works:
                if work.partition is not None:
                    self._of.setdefault(work.raw, []).append(work.partition)

    def peek(self, raw: str) -> Partition | None:
        with self._lock:
            found = self._of.get(raw)
            return found[0] if found else None

    def take(self, raw: str) -> Partition | None:
        """The oldest copy's partition, now settled (off the books)."""
        with self._lock:
            found = self._of.get(raw)
            if not found:
                return None
            partition = found.pop(0)
            if not found:
                del self._of[raw]
            return partition

    def assign(self, raws: Iterable[str]) -> list[Partition | None]:
        """Each payload's partition, the n-th copy of a payload in `raws` given its n-th placement, and
        nothing taken: an acknowledgement leaves the books only once its partition has it."""
        seen: Counter[str] = Counter()
        out: list[Partition | None] = []
        with self._lock:
            for raw in raws:
                found = self._of.get(raw, [])
                index = seen[raw]
                seen[raw] += 1
                out.append(found[index] if index < len(found) else None)
        return out

    def __len__(self) -> int:
        with self._lock:
            return sum(len(found) for found in self._of.values())
