"""Deploy markers: `cogworker.deploy_mark("v1.2")` and `cogworker deploy-mark v1.2` put a marker on
the Metrics page's charts at the time of a deploy (store/metrics_layout.py: `metrics:marks`).

A marker is its own JSON member, with the time fixed before the first try, so the write is sent
once more after a lost connection without ever adding a second marker. Markers older than
MARKS_KEEP_S are trimmed by the write that adds one.
"""

from __future__ import annotations

import getpass
import math
import time
from typing import TypedDict

import redis

from cogworker import codec
from cogworker.api import client
from cogworker.store import key_guard
from cogworker.store import metrics_layout as layout
from cogworker.store.connection import is_unavailable
from cogworker.store.scripts import ClientScript

MAX_LABEL_CHARS = 200
MAX_BY_CHARS = 100
_SCRIPT = ClientScript("deploy_mark")


class Marker(TypedDict):
    at: float  # epoch seconds
    label: str
    by: str


def marker(label: str, *, at: float | None = None, by: str | None = None) -> Marker:
    """The marker as stored: checked, with `at` now and `by` the user running this when not given."""
    if not isinstance(label, str) or not label.strip():
        raise ValueError("a deploy marker needs a label (e.g. the version deployed)")
    label = label.strip()
    if len(label) > MAX_LABEL_CHARS:
        raise ValueError(f"a deploy marker's label is at most {MAX_LABEL_CHARS} characters")
    when = time.time() if at is None else at
    if isinstance(when, bool) or not isinstance(when, int | float) or not math.isfinite(when) or when <= 0:
        raise ValueError("a deploy marker's time is a number of seconds since the epoch, above 0")
    who = _user() if by is None else by
    if not isinstance(who, str) or len(who) > MAX_BY_CHARS:
        raise ValueError(f"a deploy marker's author (by) is text of at most {MAX_BY_CHARS} characters")
    return {"at": round(float(when), 3), "label": label, "by": who}


def write(conn: redis.Redis, label: str, *, at: float | None = None, by: str | None = None) -> Marker:
    """Add a marker with `conn`; the marker written. Sent once more if the connection is lost on the
    way (the same member: at most one marker either way)."""
    mark = marker(label, at=at, by=by)
    args: list[str | float] = [mark["at"], codec.dumps(mark), f"({time.time() - layout.MARKS_KEEP_S:.3f}"]
    script = _SCRIPT.on(conn)
    try:
        reply = script(keys=[layout.marks_key()], args=args, client=conn)
    except redis.RedisError as exc:
        if not is_unavailable(exc):
            raise
        reply = script(keys=[layout.marks_key()], args=args, client=conn)
    wrong = key_guard.script_wrong_type(reply)
    if wrong is not None:
        raise key_guard.wrong_type_error(conn, wrong)
    return mark


def deploy_mark(label: str, *, at: float | None = None, by: str | None = None) -> Marker:
    """Mark a deploy on the Metrics page's charts.

    Args:
        label: What was deployed ("v1.2"), at most 200 characters.
        at: When, in seconds since the epoch; default now.
        by: Who deployed; default the user running this process.

    Returns:
        The marker written: {"at": seconds, "label": ..., "by": ...}.

    Raises:
        ValueError: An empty or too long label, a time that is not a positive number, a long `by`.
        redis.RedisError: Redis could not be reached twice in a row (nothing or the marker was
            written: calling again with the same `at` never adds a second one).

    Example:
        >>> cogworker.deploy_mark("v1.2", by="ci")  # doctest: +SKIP
        {'at': 1767225600.0, 'label': 'v1.2', 'by': 'ci'}
    """
    return write(client.connection(), label, at=at, by=by)


def _user() -> str:
    try:
        return getpass.getuser()[:MAX_BY_CHARS]
    except (KeyError, OSError):  # no user name for this uid (a container's)
        return ""
