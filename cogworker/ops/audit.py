"""The Web UI's audit trail: every action it took, who took it, and how it ended, newest first.

One capped list (`cogworker:audit`), written by cogworker/web/actions.py after each action: LPUSH and
LTRIM in one MULTI, so the list never grows past AUDIT_KEPT even when a writer dies in between. The
write is made once and never retried: a retry after a lost reply would record the action twice, and
the action itself has already happened whatever becomes of its record. Times are the UI process's
clock (a record costs no extra round trip for Redis's).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import cast

import redis

from cogworker import codec
from cogworker.store import keys

# Records kept: a few weeks of a busy team's clicks, about 300 KB.
AUDIT_KEPT = 1000


@dataclass(frozen=True, slots=True)
class AuditRecord:
    at: float  # epoch seconds, the UI process's clock
    user: str  # who: the Basic-auth user, the host app's user, or "anonymous"
    path: str  # the action's URL path (under the mount prefix)
    did: str  # what it did or why it failed: the message the operator saw
    outcome: str  # "ok" or "error"
    remote: str | None  # the client's address as the UI saw it (a proxy's, behind one)


def record(client: redis.Redis, entry: AuditRecord) -> None:
    pipe = client.pipeline(transaction=True)
    pipe.lpush(keys.AUDIT, codec.dumps(asdict(entry)))
    pipe.ltrim(keys.AUDIT, 0, AUDIT_KEPT - 1)
    pipe.execute()


def _text(value: object, default: str = "") -> str:
    return value if isinstance(value, str) else default


def _parse(raw: str) -> AuditRecord | None:
    data = codec.loads_dict(raw)
    if data is None:
        return None
    at = data.get("at")
    remote = data.get("remote")
    return AuditRecord(
        at=float(at) if isinstance(at, int | float) and not isinstance(at, bool) else 0.0,
        user=_text(data.get("user"), "anonymous"),
        path=_text(data.get("path")),
        did=_text(data.get("did")),
        outcome=_text(data.get("outcome"), "?"),
        remote=remote if isinstance(remote, str) else None,
    )


def recent(client: redis.Redis, count: int = 100, start: int = 0) -> tuple[list[AuditRecord], int]:
    """`count` records from `start` (0: the newest), and how many are kept in all. A record that
    isn't a JSON object (written by hand) is left out rather than failing the page."""
    pipe = client.pipeline(transaction=False)
    pipe.lrange(keys.AUDIT, start, start + count - 1)
    pipe.llen(keys.AUDIT)
    raw, total = pipe.execute()
    parsed = [_parse(text) for text in cast(list[str], raw)]
    return [entry for entry in parsed if entry is not None], int(total)
