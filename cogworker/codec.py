"""JSON encoding of payloads. orjson is several times faster than the stdlib on the hot path."""

from __future__ import annotations

from typing import Any

import orjson


def dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def loads(raw: str | bytes) -> Any:
    return orjson.loads(raw)


def loads_dict(raw: str | bytes) -> dict[str, Any] | None:
    """The payload as a dict, or None when it is not a JSON object (the caller buries it)."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
