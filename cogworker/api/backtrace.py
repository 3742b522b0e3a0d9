"""A failed job's backtrace in its payload, stored where and as Sidekiq stores it.

Filing (api/retry.py) writes the last lines of the traceback under `error_backtrace`, encoded as
Sidekiq 6 encodes it (`JobRetry#compress_backtrace`): the JSON array of lines, deflated with zlib,
in Base64 broken into 60-character lines (Ruby's `Base64.encode64`). Sidekiq's API, Web UI and
retry code read it as their own, so a job can fail under either system on a shared Redis.

cogworker once stored the lines as a plain JSON list under `backtrace`. Sidekiq reads that field as
its own job option (true, or how many lines to keep) and its retry code crashed on a list, losing the
job. `backtrace` is now left to the option; a list found there is an entry filed before the change,
read by `lines_of` and dropped when the job fails again.
"""

from __future__ import annotations

import base64
import binascii
import traceback
import zlib
from collections.abc import Mapping
from typing import Any

from cogworker import codec
from cogworker.api.payload import ERROR_MESSAGE_CHARS

FIELD = "error_backtrace"
OLD_FIELD = "backtrace"
LINES = 20
# Ruby's Base64.encode64 writes 60 characters a line: 45 bytes of input each.
_CHUNK_BYTES = 45
# A stored backtrace inflates to at most this much; anything larger is not one of ours or Sidekiq's
# (a few kB), and is not expanded into memory just to be shown.
MAX_INFLATED_BYTES = 1 << 20


def from_exception(exc: BaseException) -> list[str]:
    """The last LINES lines of the exception's traceback, each capped like the error message."""
    try:
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    except Exception as failure:
        return [f"<the backtrace could not be formatted: {type(failure).__name__}>"]
    # Each line capped like the message: the last one quotes the whole message, however long.
    kept = "".join(lines).splitlines()[-LINES:]
    return [codec.escape(line[:ERROR_MESSAGE_CHARS]) for line in kept]


def encode(lines: list[str]) -> str:
    """Sidekiq 6's encoding: Base64.encode64(Zlib::Deflate.deflate(JSON.generate(lines)))."""
    compressed = zlib.compress(codec.dumps(lines).encode())
    chunks = (compressed[i : i + _CHUNK_BYTES] for i in range(0, len(compressed), _CHUNK_BYTES))
    return "".join(base64.b64encode(chunk).decode() + "\n" for chunk in chunks)


def decode(value: str) -> list[str] | None:
    """The lines of an encoded backtrace (with or without line breaks, as Sidekiq 6 and 7 write it),
    or None when `value` isn't one."""
    try:
        compressed = base64.b64decode(value.encode("ascii", "replace"))
        inflater = zlib.decompressobj()
        text = inflater.decompress(compressed, MAX_INFLATED_BYTES)
        if inflater.unconsumed_tail or not inflater.eof:
            return None
        lines = codec.loads(text)
    except (binascii.Error, ValueError, zlib.error):
        return None
    return [str(line) for line in lines] if isinstance(lines, list) else None


def lines_of(payload: Mapping[str, Any] | None) -> list[str] | None:
    """The backtrace filed with a failure: `error_backtrace` decoded, else the list an older
    cogworker filed under `backtrace`; None when there is neither (or the field can't be read)."""
    payload = payload or {}
    stored = payload.get(FIELD)
    if isinstance(stored, str) and stored:
        return decode(stored)
    if isinstance(stored, list):  # Sidekiq's API reads a plain list too (its oldest format)
        return [str(line) for line in stored]
    old = payload.get(OLD_FIELD)
    return [str(line) for line in old] if isinstance(old, list) else None


def record(failed: dict[str, Any], exc: BaseException) -> None:
    """Store `exc`'s backtrace in the payload being filed. A list under `backtrace` is an older
    filing's record, not the job's option: it goes, or Sidekiq's retry code would crash on it."""
    failed[FIELD] = encode(from_exception(exc))
    if isinstance(failed.get(OLD_FIELD), list):
        del failed[OLD_FIELD]
