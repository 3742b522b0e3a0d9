"""A setting that must not be shown: a password or a signing key.

Its repr and str are stars, so it never reaches a log line or a traceback by accident; the value is
read with `get_secret_value()`. pydantic validates a plain string into one (and dumps it as stars in
JSON mode), but this module doesn't import pydantic: a swarm's workers hold their settings without it
(settings_fields.py says why).
"""

from __future__ import annotations

from typing import Any

MASK = "**********"


class Secret:
    __slots__ = ("_value",)

    def __init__(self, value: str = "") -> None:
        self._value = value

    def get_secret_value(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret({str(self)!r})"

    def __str__(self) -> str:
        return MASK if self._value else ""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        """For pydantic (only ever called by it, so imported here): a string or a secret (this one or
        pydantic's SecretStr) in, a Secret out; stars when dumped as JSON, as SecretStr does."""
        from pydantic_core import core_schema

        return core_schema.no_info_before_validator_function(
            _unwrapped,
            core_schema.no_info_after_validator_function(cls, core_schema.str_schema()),
            serialization=core_schema.plain_serializer_function_ser_schema(_dumped, info_arg=True),
        )


def _dumped(value: Secret, info: Any) -> object:
    return str(value) if info.mode_is_json() else value


def _unwrapped(value: object) -> object:
    reveal = getattr(value, "get_secret_value", None)
    return reveal() if callable(reveal) else value
