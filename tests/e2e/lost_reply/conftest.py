"""The worker-side stack of the lost-reply matrix (tests/support/matrix.py), shared by the modules whose
faults hit a worker's writes: one real Redis and one `cogworker run` worker behind the RESP proxy per
module, and a fresh case for each test. test_client_writes.py, whose faults hit the job API's writes
instead, puts its worker straight on Redis and its client behind the proxy: it has fixtures of its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cogworker.api import client as cw_client
from cogworker.settings import load_settings
from tests.support import matrix
from tests.support.matrix import Stack


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with matrix.stack(worker_through_proxy=True) as made:
        yield made


@pytest.fixture
def m(stack: Stack) -> Iterator[Stack]:
    """One case: the job API pointed straight at Redis; afterwards the worker is alive and idle,
    and nothing is left anywhere a job waits."""
    cw_client.configure(load_settings(redis_url=stack.server.url))
    stack.proxy.clear()
    yield stack
    stack.end_case()
