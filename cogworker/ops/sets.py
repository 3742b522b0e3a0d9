"""The retry, scheduled and dead sets: listing, filtering and finding an entry by jid (what to do
with them is in set_actions.py).

An entry is named by its payload's `jid`; one with no jid (an unreadable payload filed whole) by
`raw-` and a digest of its text. The Web UI names it by its key, `<score>-<ref>`, so it can find it
with one ZRANGEBYSCORE instead of a scan; its pages read one slice (`page`), or search the set for a
bounded time (set_search.py), going on from a position the next request is given.

In the sharded layout (store/shards.py) each queue partition has its own three sets: every reader
here covers them all as one set (ops/set_merge.py: merged by score, paged by position), and each
entry says which partition holds it (`Entry.partition`), where the actions run (set_actions.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import redis

from cogworker.ops import NotFound, set_fanout, set_merge
from cogworker.ops.set_entry import (
    BATCH as BATCH,
)
from cogworker.ops.set_entry import (
    RAW_REF_PREFIX as RAW_REF_PREFIX,
)
from cogworker.ops.set_entry import (
    SETS as SETS,
)
from cogworker.ops.set_entry import (
    UNREADABLE as UNREADABLE,
)
from cogworker.ops.set_entry import (
    Entry as Entry,
)
from cogworker.ops.set_entry import (
    Filter as Filter,
)
from cogworker.ops.set_entry import (
    at_score_in as at_score_in,
)
from cogworker.ops.set_entry import (
    entry_key as entry_key,
)
from cogworker.ops.set_entry import (
    parse_entry as parse_entry,
)
from cogworker.ops.set_entry import (
    parse_key as parse_key,
)
from cogworker.ops.set_entry import (
    raw_ref as raw_ref,
)
from cogworker.ops.set_entry import (
    set_key as set_key,
)
from cogworker.ops.set_entry import (
    sharded as sharded,
)


# Names only: set_key gives the key, built with the prefix in force (store/keys.py).
def size(client: redis.Redis, set_name: str) -> int:
    if sharded():
        return sum(set_merge.sizes(client, set_fanout.partitions(client), set_name))
    return client.zcard(set_key(set_name))


def _scan(client: redis.Redis, set_name: str, match: Filter | None = None) -> Iterator[Entry]:
    """Every entry in listing order: dead newest first, retry and scheduled soonest due first (only
    those whose stored text may match `match`: the others aren't decoded)."""
    newest_first = set_name == "dead"
    if sharded():
        merged, _total = set_merge.stream(client, set_name, desc=newest_first)
        for raw, score, partition in merged:
            if match is None or match.may_match(raw):
                yield parse_entry(set_name, raw, score, partition)
        return
    key = set_key(set_name)
    start = 0
    while True:
        page = cast(
            list[tuple[str, float]],
            client.zrange(key, start, start + BATCH - 1, desc=newest_first, withscores=True),
        )
        for raw, score in page:
            if match is None or match.may_match(raw):
                yield parse_entry(set_name, raw, score)
        if len(page) < BATCH:
            return
        start += BATCH


def entries(
    client: redis.Redis, set_name: str, match: Filter | None = None, limit: int | None = None
) -> list[Entry]:
    match = match or Filter()
    found = []
    for entry in _scan(client, set_name, match):
        if match(entry):
            found.append(entry)
            if limit is not None and len(found) >= limit:
                break
    return found


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def find(client: redis.Redis, set_name: str, ref: str) -> Entry | None:
    """The entry named `ref` (a jid, or raw-<digest>); the soonest-due one if several share it."""
    found: list[Entry] = []
    if ref.startswith(RAW_REF_PREFIX):
        found = [e for e in _scan(client, set_name) if e.jid is None and raw_ref(e.raw) == ref]
    else:
        # ZSCAN's MATCH narrows the search to entries whose text holds the jid; the decoded payload
        # decides. The sharded layout scans every partition's set.
        pattern = f"*{_glob_escape(ref)}*"
        places = set_fanout.partitions(client) if sharded() else [None]
        for partition in places:
            holder = set_fanout.client_of(client, partition)
            for raw, score in holder.zscan_iter(set_key(set_name, partition), match=pattern, count=BATCH):
                entry = parse_entry(set_name, str(raw), float(score), partition)
                if entry.jid == ref:
                    found.append(entry)
    return min(found, key=lambda e: e.score) if found else None


def at_score(client: redis.Redis, set_name: str, score: float, ref: str) -> Entry | None:
    """The entry named `ref` among those scored exactly `score` (ZRANGEBYSCORE score score): no scan.
    Entries sharing a score are read in slices, so even a thousand scheduled for one instant stay
    cheap to look through."""
    if sharded():
        return set_merge.at_score(client, set_name, score, ref)
    return at_score_in(client, set_name, score, ref, None)


def page(client: redis.Redis, set_name: str, start: int, count: int, desc: bool = True) -> list[Entry]:
    """One slice of the set in score order (desc: highest score first), from position `start`."""
    if count < 1:
        return []
    if sharded():
        return set_merge.page(client, set_name, start, count, desc)[0]
    chunk = cast(
        list[tuple[str, float]],
        client.zrange(set_key(set_name), start, start + count - 1, desc=desc, withscores=True),
    )
    return [parse_entry(set_name, raw, score) for raw, score in chunk]


def get(client: redis.Redis, set_name: str, ref: str, score: float | None = None) -> Entry:
    """The entry named `ref`: by its exact score when known (one lookup), else by a scan."""
    entry = find(client, set_name, ref) if score is None else at_score(client, set_name, score, ref)
    if entry is None:
        raise NotFound(f"no job {ref} in the {set_name} set")
    return entry
