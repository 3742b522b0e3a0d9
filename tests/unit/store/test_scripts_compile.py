"""Every script Redis is sent compiles: its file with the prelude helpers it calls in front (and the
batch scripts, built from several files), loaded with SCRIPT LOAD into a real Redis. A helper call that
the prelude lacks, or a slip left by an edit, fails here at once instead of in the one e2e test that
happens to run the script."""

from __future__ import annotations

import hashlib

import pytest
import redis

from tests.support.proxy_rules import cogworker_script_texts


@pytest.mark.parametrize(
    "text", cogworker_script_texts(), ids=lambda t: hashlib.sha1(t.encode()).hexdigest()[:8]
)
def test_the_loaded_text_compiles_in_redis(r: redis.Redis, text: str) -> None:
    assert r.script_load(text) == hashlib.sha1(text.encode()).hexdigest()
