"""The command packer every cogworker client uses: hiredis called directly where it can be, the same
bytes as redis-py's own packers, and text hiredis refuses (escaped invalid UTF-8) still sent."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from redis.connection import PythonRespSerializer

from cogworker.store.connection import ENCODING, ENCODING_ERRORS, LosslessPacker, text_options


def reference(*args: Any) -> bytes:
    encoder = redis.connection.Encoder(ENCODING, ENCODING_ERRORS, False)  # type: ignore[no-untyped-call]
    return b"".join(PythonRespSerializer(6000, encoder.encode).pack(*args))  # type: ignore[no-untyped-call]


@pytest.mark.parametrize(
    "args",
    [
        ("EVALSHA", "a" * 40, 2, "cogworker:queue:q0001", "cogworker:suspects:q0001", 12, 0, "q0001", ""),
        ("SET", "k", b"\x00\xff", memoryview(b"mv"), 7),
        ("CONFIG GET", "maxmemory"),  # a command name of two words
        ("LREM", "k", -1, "caf\udce9"),  # invalid UTF-8, read with surrogateescape
    ],
)
def test_packs_what_redis_py_packs(args: tuple[Any, ...]) -> None:
    assert "command_packer" in text_options()
    assert b"".join(LosslessPacker().pack(*args)) == reference(*args)


def test_an_argument_of_no_redis_type_is_refused_as_redis_py_refuses_it() -> None:
    with pytest.raises(redis.DataError):
        LosslessPacker().pack("SET", "k", object())
