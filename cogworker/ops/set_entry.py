"""An entry of the retry, scheduled and dead sets: its fields, its key in the Web UI, the set that holds it
(the one-slot layout's, or a queue partition's), and a read of one set at one score. Shared by sets.py
and set_merge.py (which reads every partition's sets as one) without either importing the other."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, cast

import redis

from cogworker import codec
from cogworker.api import backtrace, timestamps
from cogworker.ops import OpsError
from cogworker.store import keys, shards
from cogworker.store.shards import Partition

SETS = ("retry", "scheduled", "dead")
UNREADABLE = "cogworker.UnreadablePayload"
RAW_REF_PREFIX = "raw-"
BATCH = 500
# Characters JSON writers (orjson, Python's json, Ruby's) write as themselves inside a string.
_LITERAL = re.compile(r"[A-Za-z0-9 _.\-]+")


@dataclass(frozen=True, slots=True)
class Filter:
    queue: str | None = None  # exact queue name
    job: str | None = None  # substring of the job's name
    error: str | None = None  # substring of its error class or message
    args: str | None = None  # substring of the JSON of its args and kwargs
    job_class: str | None = None  # exactly the job's name (a group of set_groups.py)
    error_class: str | None = None  # exactly its error class (a group of set_groups.py)

    def __call__(self, entry: Entry) -> bool:
        if self.queue is not None and entry.queue != self.queue:
            return False
        if self.job_class is not None and entry.job != self.job_class:
            return False
        if self.error_class is not None and entry.error_class != self.error_class:
            return False
        if self.job is not None and self.job not in (entry.job or ""):
            return False
        if self.error is not None:
            text = f"{entry.error_class or ''}: {entry.error_message or ''}"
            if self.error not in text:
                return False
        if self.args is not None:
            text = f"{codec.dumps_lenient(entry.args)[0]} {codec.dumps_lenient(entry.kwargs)[0]}"
            if self.args not in text:
                return False
        return True

    def may_match(self, raw: str) -> bool:
        """False when the entry's stored text can't hold a match, so a search skips decoding it.
        Only for needles of characters every JSON writer writes as themselves: anything else (and
        the args filter, whose text is the args written again) is left to the decoded entry. An
        error needle starting with a space could span the ": " that joins class and message."""
        needles = [self.job, self.job_class, self.error_class]
        if self.error is not None and not self.error.startswith(" "):
            needles.append(self.error)
        return all(n is None or not _LITERAL.fullmatch(n) or n in raw for n in needles)

    @property
    def empty(self) -> bool:
        return all(
            value is None
            for value in (self.queue, self.job, self.error, self.args, self.job_class, self.error_class)
        )


@dataclass(frozen=True, slots=True)
class Entry:
    ref: str  # what the verbs take: the jid, or raw-<digest> when there is none
    set: str  # retry, scheduled or dead
    score: float  # when it is due (retry, scheduled) or when it died (dead)
    jid: str | None
    job: str | None
    queue: str | None
    args: list[Any]
    kwargs: dict[str, Any]
    retry_count: int | None
    error_class: str | None
    error_message: str | None
    failed_at: float | None
    readable: bool  # False: the payload isn't a job this code can put back on a queue
    payload: dict[str, Any] | None  # the whole decoded payload (None when it isn't a JSON object)
    raw: str  # the entry exactly as stored
    # The queue partition whose set holds it (the sharded layout; None: the one-slot layout's set).
    # Every action on the entry runs there (set_actions.py).
    partition: Partition | None = None

    @property
    def backtrace(self) -> list[str] | None:
        """The backtrace filed with the failure (`error_backtrace`, or an older filing's `backtrace`
        list), decoded when asked for: a listing never pays for it."""
        return backtrace.lines_of(self.payload)

    @property
    def key(self) -> str:
        """The name the Web UI gives it: found again by its score without a scan."""
        return entry_key(self.score, self.ref)

    @property
    def summary(self) -> dict[str, Any]:
        """The fields a listing shows (everything but the whole payload and raw text); in the sharded
        layout also the queue partition holding it (`default#2`)."""
        fields = {
            "ref": self.ref,
            "set": self.set,
            "score": self.score,
            "jid": self.jid,
            "job": self.job,
            "queue": self.queue,
            "args": self.args,
            "kwargs": self.kwargs,
            "retry_count": self.retry_count,
            "error_class": self.error_class,
            "error_message": self.error_message,
            "failed_at": self.failed_at,
            "readable": self.readable,
        }
        if self.partition is not None:
            fields["partition"] = str(self.partition)
        return fields


def set_key(name: str, partition: Partition | None = None) -> str:
    """The set's key: the one-slot layout's, or (sharded layout) `partition`'s own."""
    try:
        return keys.job_sets()[name] if partition is None else shards.job_sets(partition)[name]
    except KeyError:
        raise OpsError(f"unknown set {name!r}: use one of {', '.join(SETS)}") from None


def sharded() -> bool:
    """Whether the sets are every queue partition's (ops/set_merge.py reads them as one)."""
    return shards.is_sharded()


# A float as repr writes it (what `entry_key` puts first), then "-" and the ref. Not a plain split at
# the first "-": repr writes small scores with a negative exponent ("1e-05").
_KEY = re.compile(r"(-?(?:inf|nan|(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?))-(.+)", re.DOTALL)


def entry_key(score: float, ref: str) -> str:
    return f"{score!r}-{ref}"


def parse_key(key: str) -> tuple[float, str] | None:
    """(score, ref) from an `entry_key`, or None when `key` isn't one."""
    found = _KEY.fullmatch(key)
    if found is None:
        return None
    try:
        return float(found.group(1)), found.group(2)
    except ValueError:
        return None


def raw_ref(raw: str) -> str:
    # The digest of the stored bytes: an entry that isn't UTF-8 has one too.
    return RAW_REF_PREFIX + hashlib.sha256(codec.original_bytes(raw)).hexdigest()[:16]


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _float_or_none(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def parse_entry(set_name: str, raw: str, score: float, partition: Partition | None = None) -> Entry:
    job = codec.loads_dict(raw)
    payload = job or {}
    name = _str_or_none(payload.get("class"))
    queue = _str_or_none(payload.get("queue"))
    jid = _str_or_none(payload.get("jid"))
    args, kwargs = payload.get("args"), payload.get("kwargs")
    count = payload.get("retry_count")
    return Entry(
        ref=jid or raw_ref(raw),
        set=set_name,
        score=score,
        jid=jid,
        job=name,
        queue=queue,
        args=args if isinstance(args, list) else [],
        kwargs=kwargs if isinstance(kwargs, dict) else {},
        retry_count=count if isinstance(count, int) and not isinstance(count, bool) else None,
        error_class=_str_or_none(payload.get("error_class")),
        error_message=_str_or_none(payload.get("error_message")),
        failed_at=timestamps.field_s(payload, "failed_at"),  # seconds, or Sidekiq 8's milliseconds
        readable=job is not None and name is not None and name != UNREADABLE and queue is not None,
        payload=job,
        raw=raw,
        partition=partition,
    )


def at_score_in(
    client: redis.Redis, set_name: str, score: float, ref: str, partition: Partition | None, offset: int = 0
) -> Entry | None:
    """`at_score` in one set: the one-slot layout's, or `partition`'s (on that partition's client),
    from `offset` among the entries of that score."""
    key = set_key(set_name, partition)
    while True:
        chunk = cast(
            list[tuple[str, float]],
            client.zrangebyscore(key, score, score, start=offset, num=BATCH, withscores=True),
        )
        for raw, found_score in chunk:
            entry = parse_entry(set_name, raw, found_score, partition)
            if entry.ref == ref:
                return entry
        if len(chunk) < BATCH:
            return None
        offset += BATCH
