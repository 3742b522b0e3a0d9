"""RESP framing for the fault-injecting proxy (resp_proxy.py): find where each value ends in a byte
stream, RESP2 and RESP3 alike, without building anything the proxy doesn't need.

The proxy forwards bytes as they came; it parses only to learn where one command (or reply) ends
and what a command is called, so a frame is returned as its raw bytes plus, for a command, its
arguments. Every RESP3 type is framed: simple types on one line (`+ - : , ( # _`), blob types with a
length (`$ = !`), aggregates (`* ~ > % |`). An attribute (`|`) belongs to the value that follows it,
so the two are one frame. A push (`>`) is out of band: it answers no command.
"""

from __future__ import annotations

from dataclasses import dataclass

_LINE_TYPES = frozenset(b"+-:,(#_")
_BLOB_TYPES = frozenset(b"$=!")
_AGGREGATE_TYPES = frozenset(b"*~>%|")


class Incomplete(Exception):
    """More bytes are needed to finish the frame."""


@dataclass(frozen=True)
class Frame:
    raw: bytes
    # A push (`>`), which pairs with no command: a RESP3 invalidation or a pub/sub message.
    push: bool
    # The first line's type byte: `-` for an error, `!` for a blob error.
    kind: int


def _line_end(buf: bytes | bytearray, pos: int) -> int:
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise Incomplete
    return end


def _skip(buf: bytes | bytearray, pos: int) -> int:
    """The offset just past the value starting at `pos`."""
    if pos >= len(buf):
        raise Incomplete
    kind = buf[pos]
    end = _line_end(buf, pos + 1)
    if kind in _LINE_TYPES:
        return end + 2
    if kind in _BLOB_TYPES:
        size = int(buf[pos + 1 : end])
        if size < 0:
            return end + 2
        stop = end + 2 + size + 2
        if len(buf) < stop:
            raise Incomplete
        return stop
    if kind in _AGGREGATE_TYPES:
        count = int(buf[pos + 1 : end])
        nxt = end + 2
        if count < 0:
            return nxt
        if kind in (ord("%"), ord("|")):
            count *= 2
        for _ in range(count):
            nxt = _skip(buf, nxt)
        if kind == ord("|"):
            return _skip(buf, nxt)
        return nxt
    raise ValueError(f"not a RESP type byte: {bytes([kind])!r}")


def reply_frame(buf: bytes | bytearray, pos: int) -> tuple[Frame, int]:
    """The reply starting at `pos` and the offset after it; Incomplete when it isn't all there."""
    if pos >= len(buf):
        raise Incomplete
    stop = _skip(buf, pos)
    first = pos
    # An attribute prefixes the value it describes; the value's own type is what matters.
    while buf[first] == ord("|"):
        end = _line_end(buf, first + 1)
        count = int(buf[first + 1 : end]) * 2
        first = end + 2
        for _ in range(count):
            first = _skip(buf, first)
    return Frame(bytes(buf[pos:stop]), buf[first] == ord(">"), buf[first]), stop


def command_frame(buf: bytes | bytearray, pos: int) -> tuple[list[bytes], bytes, int]:
    """The command starting at `pos`: its arguments, its raw bytes, and the offset after it.

    A client sends an array of bulk strings; an inline command (a line of words, as telnet sends)
    is accepted too."""
    if pos >= len(buf):
        raise Incomplete
    if buf[pos] != ord("*"):
        end = _line_end(buf, pos)
        return bytes(buf[pos:end]).split(), bytes(buf[pos : end + 2]), end + 2
    end = _line_end(buf, pos + 1)
    count = int(buf[pos + 1 : end])
    nxt = end + 2
    args: list[bytes] = []
    for _ in range(max(count, 0)):
        if nxt >= len(buf):
            raise Incomplete
        if buf[nxt] != ord("$"):
            raise ValueError("a command's arguments must be bulk strings")
        line = _line_end(buf, nxt + 1)
        size = int(buf[nxt + 1 : line])
        start = line + 2
        if len(buf) < start + size + 2:
            raise Incomplete
        args.append(bytes(buf[start : start + size]))
        nxt = start + size + 2
    return args, bytes(buf[pos:nxt]), nxt


def encode_command(*args: bytes | str | int) -> bytes:
    """A command as a client sends it (for the proxy's own tests, which speak raw RESP)."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)
