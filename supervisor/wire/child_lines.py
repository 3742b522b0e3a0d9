"""The supervisor side of the child -> supervisor pipe: bytes in, messages out.

A child writes one JSON object per line (cogworker/report.py): `booted`, `ready`, `status`, `stopping`,
`stopped`, `boot_error`, `stuck`. A pipe read can end anywhere, so bytes wait in a buffer until their newline
comes. Nothing a child writes may crash the supervisor: a line that isn't a JSON object with an `event`
is reported as garbage and skipped, and a line without an end is cut off at MAX_LINE_BYTES.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

# Far above any real line (a status line is a few hundred bytes, more with per-job counts for many
# job classes): a child writing without newlines (a job printing to the inherited pipe fd, say) must
# not grow our memory without bound.
MAX_LINE_BYTES = 1024 * 1024

EVENTS = frozenset({"booted", "ready", "status", "stopping", "stopped", "boot_error", "stuck"})


@dataclass(frozen=True, slots=True)
class Message:
    event: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Garbage:
    """A line that is not a message; kept (shortened) so the log can show what was sent."""

    reason: str
    sample: str


def parse_line(line: bytes) -> Message | Garbage:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return Garbage("not JSON", _sample(line))
    if not isinstance(value, dict):
        return Garbage("not a JSON object", _sample(line))
    event = value.pop("event", None)
    if not isinstance(event, str) or not event:
        return Garbage("no event name", _sample(line))
    return Message(event, value)


def _sample(line: bytes) -> str:
    return line[:200].decode("utf-8", errors="replace")


class LineBuffer:
    """Accumulates pipe bytes and yields whole lines as messages (or garbage)."""

    def __init__(self, pending: bytes = b"") -> None:
        self._pending = pending
        self._discarding = False  # inside an over-long line: drop bytes until its newline

    @property
    def pending(self) -> bytes:
        """Bytes of an unfinished line (handed over across a re-exec)."""
        return self._pending

    def feed(self, data: bytes) -> list[Message | Garbage]:
        out: list[Message | Garbage] = []
        buffer = self._pending + data
        *lines, rest = buffer.split(b"\n")
        for line in lines:
            if self._discarding:
                self._discarding = False
                continue
            stripped = line.strip()
            if stripped:
                out.append(parse_line(stripped))
        if len(rest) > MAX_LINE_BYTES:
            if not self._discarding:
                out.append(Garbage(f"line longer than {MAX_LINE_BYTES} bytes", _sample(rest)))
            self._discarding = True
            rest = b""
        self._pending = rest
        return out
