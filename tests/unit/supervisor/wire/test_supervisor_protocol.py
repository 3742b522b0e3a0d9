"""Pipe line parsing: whole lines, partial lines, garbage, runaway lines."""

from __future__ import annotations

from supervisor.wire.child_lines import MAX_LINE_BYTES, Garbage, LineBuffer, Message, parse_line


def test_whole_lines_become_messages() -> None:
    buf = LineBuffer()
    out = buf.feed(b'{"event":"booted","pid":7,"identity":"h:7:ab"}\n{"event":"ready","pid":7}\n')
    assert out == [
        Message("booted", {"pid": 7, "identity": "h:7:ab"}),
        Message("ready", {"pid": 7}),
    ]
    assert buf.pending == b""


def test_a_line_split_across_reads_waits_for_its_newline() -> None:
    buf = LineBuffer()
    assert buf.feed(b'{"event":"sta') == []
    assert buf.feed(b'tus","busy":1,') == []
    assert buf.pending == b'{"event":"status","busy":1,'
    assert buf.feed(b'"threads":2}\n{"event":"stopp') == [Message("status", {"busy": 1, "threads": 2})]
    assert buf.feed(b'ing"}\n') == [Message("stopping", {})]


def test_one_byte_at_a_time() -> None:
    buf = LineBuffer()
    out = []
    for byte in b'{"event":"stopped","code":0}\n':
        out += buf.feed(bytes([byte]))
    assert out == [Message("stopped", {"code": 0})]


def test_garbage_is_reported_and_skipped_without_losing_what_follows() -> None:
    buf = LineBuffer()
    out = buf.feed(b'hello from a job\n[1,2]\n{"no_event":1}\n{"event":""}\n\xff\xfe\n\n{"event":"ready"}\n')
    assert [type(o) for o in out] == [Garbage, Garbage, Garbage, Garbage, Garbage, Message]
    assert [o.reason for o in out if isinstance(o, Garbage)] == [
        "not JSON",
        "not a JSON object",
        "no event name",
        "no event name",
        "not JSON",
    ]
    assert out[0] == Garbage("not JSON", "hello from a job")
    assert out[-1] == Message("ready", {})


def test_a_runaway_line_is_cut_off_once_and_the_stream_recovers() -> None:
    buf = LineBuffer()
    out = buf.feed(b"x" * (MAX_LINE_BYTES + 1))
    assert len(out) == 1 and isinstance(out[0], Garbage)
    assert buf.pending == b""
    assert buf.feed(b"y" * (MAX_LINE_BYTES + 1)) == []  # still the same line: reported once
    assert buf.feed(b'yyy\n{"event":"ready"}\n') == [Message("ready", {})]


def test_pending_bytes_survive_a_hand_over() -> None:
    buf = LineBuffer()
    buf.feed(b'{"event":"ready","pid":')
    again = LineBuffer(buf.pending.decode("latin-1").encode("latin-1"))
    assert again.feed(b"3}\n") == [Message("ready", {"pid": 3})]


def test_parse_line_keeps_fields_apart_from_the_event() -> None:
    assert parse_line(b'{"event":"boot_error","error":"boom"}') == Message("boot_error", {"error": "boom"})
