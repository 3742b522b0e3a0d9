"""A failed job's backtrace in its payload, stored where and as Sidekiq stores it.

Filing (api/retry.py) writes the last lines of the traceback under `error_backtrace`, encoded as
Sidekiq 6 encodes it (`JobRetry#compress_backtrace`): the JSON array of lines, deflated with zlib,
in Base64 broken into 60-character lines (Ruby's `Base64.encode64`). Sidekiq's API, Web UI and
retry code read it as their own, so a job can fail under either system on a shared Redis.

cogworker once stored the lines as a plain JSON list under `backtrace`. Sidekiq reads that field as
its own job option (true, or how many lines to keep) and its retry code crashed on a list, losing the
job. `backtrace` is now left to the option; a list found there is an entry filed before the change,
read by `lines_of` and dropped when the job fails again.

What is kept (`from_exception`): the whole chain, root cause first, joined by Python's own sentences
("The above exception was the direct cause of the following exception:"), so `raise X from exc`
keeps what went wrong first. Before any cap, cogworker's own frames (files inside this package: the
worker that called the job) and Python's caret lines (`^^^^` under a source line) go: they filled
the old 20 lines and said nothing about the failure. Then at most about LINES lines are kept: each
exception's class and message, and the frames nearest to where it was raised, a line such as
"… 12 frames omitted" standing where frames were cut. Sixty lines hold a cause and its error with
a dozen frames each; deflated, that is a few kB in each retry and dead entry (a set of 10,000 dead
jobs stays tens of MB), and a deeper recursion is cut to its last frames, which is where it failed.
"""

from __future__ import annotations

import base64
import binascii
import functools
import os
import traceback
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cogworker import codec
from cogworker.api.payload import ERROR_MESSAGE_CHARS

FIELD = "error_backtrace"
OLD_FIELD = "backtrace"
LINES = 60
# A chain longer than this keeps its root cause and the exceptions nearest the failure.
CHAIN = 4
# An exception's message lines (class and message, notes) kept per exception in the chain.
MESSAGE_LINES = 6
CAUSE = "The above exception was the direct cause of the following exception:"
CONTEXT = "During handling of the above exception, another exception occurred:"
HEADER = "Traceback (most recent call last):"
# The installed cogworker package (this file is cogworker/api/backtrace.py).
_PACKAGE = os.path.dirname(os.path.dirname(os.path.realpath(__file__))) + os.sep
# Ruby's Base64.encode64 writes 60 characters a line: 45 bytes of input each.
_CHUNK_BYTES = 45
# A stored backtrace inflates to at most this much; anything larger is not one of ours or Sidekiq's
# (a few kB), and is not expanded into memory just to be shown.
MAX_INFLATED_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class _Block:
    """One exception of the chain: the sentence linking it to the one before, its frames (each one or
    two lines), and its class and message lines."""

    link: str | None
    frames: list[list[str]]
    message: list[str]

    @property
    def frame_lines(self) -> int:
        return sum(len(frame) for frame in self.frames)


def from_exception(exc: BaseException) -> list[str]:
    """The exception's chain as Python prints it, without cogworker's frames or caret lines, capped
    at about LINES lines (the last frames of each exception kept), each line capped like the error
    message."""
    try:
        lines = _capped([_block(found, link) for found, link in _chain(exc)])
    except Exception as failure:
        return [f"<the backtrace could not be formatted: {type(failure).__name__}>"]
    return [codec.escape(line[:ERROR_MESSAGE_CHARS]) for line in lines]


def _chain(exc: BaseException) -> list[tuple[BaseException, str | None]]:
    """The chain root cause first, each exception with the sentence printed above it (None for the
    first); an exception met twice (a cycle) ends it. A long chain keeps its root and its last."""
    newest_first: list[tuple[BaseException, str | None]] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if current.__cause__ is not None:
            newest_first.append((current, CAUSE))
            current = current.__cause__
        elif current.__context__ is not None and not current.__suppress_context__:
            newest_first.append((current, CONTEXT))
            current = current.__context__
        else:
            newest_first.append((current, None))
            current = None
    ordered = list(reversed(newest_first))
    ordered[0] = (ordered[0][0], None)
    if len(ordered) > CHAIN:
        skipped = len(ordered) - CHAIN
        ordered = [ordered[0], *ordered[-(CHAIN - 1) :]]
        note = f"… {skipped} chained exception{'s' if skipped > 1 else ''} omitted; then: {ordered[1][1]}"
        ordered[1] = (ordered[1][0], note)
    return ordered


@functools.lru_cache(maxsize=4096)
def _is_own(filename: str) -> bool:
    return os.path.realpath(filename).startswith(_PACKAGE)


def _block(exc: BaseException, link: str | None) -> _Block:
    summary = traceback.extract_tb(exc.__traceback__)
    frames = [
        [
            f'  File "{f.filename}", line {f.lineno}, in {f.name}',
            *([f"    {f.line.strip()}"] if f.line else []),
        ]
        for f in summary
        if not _is_own(f.filename)
    ]
    if not frames and summary:
        # Every frame is cogworker's: the failure is its own (a payload it couldn't load), so its
        # frames are the story.
        frames = [[f'  File "{f.filename}", line {f.lineno}, in {f.name}'] for f in summary]
    message = "".join(traceback.format_exception_only(type(exc), exc)).splitlines()
    if len(message) > MESSAGE_LINES:
        cut = len(message) - MESSAGE_LINES + 1
        message = [*message[: MESSAGE_LINES - 1], f"… {cut} more line{'s' if cut > 1 else ''}"]
    return _Block(link, frames, message)


def _capped(blocks: list[_Block]) -> list[str]:
    """The blocks' lines, frames shared out so the whole is about LINES lines: a block needing
    fewer than its share leaves the rest to the others; every block keeps at least its last frame."""
    fixed = sum(len(b.message) + (1 if b.frames else 0) + (3 if b.link else 0) for b in blocks)
    room = max(0, LINES - fixed)
    shares: dict[int, int] = {}
    for done, index in enumerate(sorted(range(len(blocks)), key=lambda i: blocks[i].frame_lines)):
        share = room // (len(blocks) - done)
        shares[index] = min(blocks[index].frame_lines, share)
        room -= shares[index]
    lines: list[str] = []
    for index, block in enumerate(blocks):
        if block.link:
            lines += ["", block.link, ""]
        if block.frames:
            lines.append(HEADER)
            lines += _last_frames(block.frames, shares[index])
        lines += block.message
    return lines


def _last_frames(frames: list[list[str]], room: int) -> list[str]:
    """The frames nearest the raise that fit in `room` lines, after a line saying how many were cut
    (that line takes room too); at least the last frame."""
    if sum(len(f) for f in frames) <= room:
        return [line for frame in frames for line in frame]
    kept: list[list[str]] = []
    used = 1
    for frame in reversed(frames):
        if kept and used + len(frame) > room:
            break
        kept.insert(0, frame)
        used += len(frame)
    cut = len(frames) - len(kept)
    return [f"  … {cut} frame{'s' if cut > 1 else ''} omitted", *(line for frame in kept for line in frame)]


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
