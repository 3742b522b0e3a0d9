"""JSON encoding of payloads. orjson is several times faster than the stdlib on the hot path.

Text read from Redis is decoded with `surrogateescape` (store/connection.py): a byte that isn't UTF-8
becomes a lone surrogate, so the text still matches the stored bytes when sent back (an LREM or ZREM
finds it). orjson refuses such text, and so does any UTF-8 output, so whatever shows or stores it
goes through `escape` (or `sanitise`) first.
"""

from __future__ import annotations

import base64
import re
from typing import Any

import orjson

# orjson raises this (a TypeError) for a value it can't write: a lone surrogate in a string, nesting
# deeper than it writes (254 levels; it reads up to 1,024), an integer past 64 bits, a non-str key.
EncodeError = orjson.JSONEncodeError

# Containers deeper than this are replaced by their repr when a record must be sanitised: orjson
# writes 254 levels, and the record that carries a payload adds a level or two around it.
MAX_DEPTH = 200
REPR_CHARS = 2_000
_SURROGATE = re.compile("[\ud800-\udfff]")


def dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def dumps_bytes(value: Any) -> bytes:
    """`dumps` as the UTF-8 bytes orjson writes, for a payload sent to Redis as it is (a str would be
    one more copy of it, encoded again on the way out)."""
    return orjson.dumps(value)


def loads(raw: str | bytes) -> Any:
    return orjson.loads(raw)


def loads_dict(raw: str | bytes) -> dict[str, Any] | None:
    """The payload as a dict, or None when it is not a JSON object (the caller buries it)."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


_CLASS_KEY = '{"class":"'


def class_name(raw: str) -> str | None:
    """The payload's `class` when it is a string, else None, without decoding a large payload: a job
    cogworker pushed starts with its `class` (orjson writes keys in order) and has no other `"class"`
    in it. Anything else (a name with escapes, a `"class"` further on, which a duplicate key or an
    argument could be, or another writer's order) is read by decoding the whole payload."""
    if raw.startswith(_CLASS_KEY):
        end = raw.find('"', len(_CLASS_KEY))
        if end > 0 and "\\" not in raw[len(_CLASS_KEY) : end] and raw.find('"class"', end) < 0:
            return raw[len(_CLASS_KEY) : end]
    job = loads_dict(raw)
    name = job.get("class") if job is not None else None
    return name if isinstance(name, str) else None


def is_utf8(text: str) -> bool:
    """False when `text` holds a lone surrogate: bytes read from Redis that weren't UTF-8."""
    return text.isascii() or _SURROGATE.search(text) is None


def _escape_one(match: re.Match[str]) -> str:
    code = ord(match.group())
    # U+DC80..U+DCFF is how surrogateescape spells the byte 0x80..0xFF it couldn't decode.
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def escape(text: str) -> str:
    """`text` with every lone surrogate written out with a backslash: an undecodable byte as
    `\\xff`, any other surrogate as `\\ud800`. Valid text comes back unchanged (the same object)."""
    return text if is_utf8(text) else _SURROGATE.sub(_escape_one, text)


def original_bytes(text: str) -> bytes:
    """The bytes `text` was decoded from (the inverse of the surrogateescape decoding); a surrogate
    that decoding can't have made is kept as its UTF-8-like encoding, never raised on."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def raw_fields(raw: str) -> dict[str, str]:
    """How a record keeps a payload it can't store as JSON: `raw`, readable (escaped where it isn't
    UTF-8), and, when escaping changed it, `raw_base64`, the exact bytes."""
    shown = escape(raw)
    if shown is raw:
        return {"raw": raw}
    return {"raw": shown, "raw_base64": base64.b64encode(original_bytes(raw)).decode()}


def sanitise(value: Any, notes: list[str], path: str = "", depth: int = 0) -> Any:
    """A copy of `value` that orjson can write: strings escaped, containers nested past MAX_DEPTH
    and values JSON has no type for replaced by their repr (truncated), integers past 64 bits by
    their decimal text. Each change is described in `notes`, by the path of what changed."""
    if isinstance(value, str):
        shown = escape(value)
        if shown is not value:
            notes.append(f"{path or 'value'}: lone surrogates backslash-escaped")
        return shown
    if value is None or isinstance(value, bool | float):
        return value
    if isinstance(value, int):
        if -(2**63) <= value < 2**64:
            return value
        notes.append(f"{path or 'value'}: integer past 64 bits, kept as its decimal text")
        return str(value)
    if isinstance(value, list | tuple | dict) and depth >= MAX_DEPTH:
        notes.append(f"{path or 'value'}: nested deeper than {MAX_DEPTH} levels, replaced by its repr")
        return _short_repr(value)
    if isinstance(value, list | tuple):
        return [sanitise(item, notes, f"{path}[{i}]", depth + 1) for i, item in enumerate(value)]
    if isinstance(value, dict):
        clean: dict[str, Any] = {}
        for key, item in value.items():
            name = _key(key, notes, path)
            clean[name] = sanitise(item, notes, f"{path}.{name}" if path else name, depth + 1)
        return clean
    notes.append(f"{path or 'value'}: {type(value).__name__} is not JSON, replaced by its repr")
    return _short_repr(value)


def _key(key: Any, notes: list[str], path: str) -> str:
    text = key if isinstance(key, str) else str(key)
    shown = escape(text)
    if shown is not key:
        notes.append(f"{path or 'value'}: key {shown!r} rewritten as a plain string")
    return shown


def _short_repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception as exc:  # a hostile __repr__, or one too deep to recurse through
        text = f"<{type(value).__name__}: repr failed: {type(exc).__name__}>"
    text = escape(text)
    return text if len(text) <= REPR_CHARS else text[: REPR_CHARS - 1] + "…"


def dumps_lenient(value: Any) -> tuple[str, list[str]]:
    """`dumps`, or, when orjson refuses `value`, the JSON of a sanitised copy and what was changed.
    Never raises: for records (logs, dead entries, listings) that must be written whatever they hold."""
    try:
        return dumps(value), []
    except EncodeError:
        notes: list[str] = []
        return dumps(sanitise(value, notes)), notes
