"""Locks across a fork (docs/architecture.md, "Locks across a fork"): each lock of cogworker's that an
app thread in a preloading fork server may hold is free in a child forked while another thread holds
it. Forked from this process, with the holder a real thread; the swarm's case is
tests/e2e/swarm/test_swarm_fork_locks.py."""

from __future__ import annotations

import os
import threading

import fork_lock_app
import pytest


@pytest.mark.parametrize("name", sorted(fork_lock_app.LOCKS))
def test_a_child_forked_while_a_thread_holds_the_lock_can_take_it(name: str) -> None:
    held, release = threading.Event(), threading.Event()
    lock = fork_lock_app.LOCKS[name]()

    def hold() -> None:
        with lock:
            held.set()
            release.wait(timeout=60)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    reading, writing = os.pipe()
    try:
        assert held.wait(timeout=30)
        pid = os.fork()
        if pid == 0:  # pragma: no cover  (the child: say whether the lock could be taken, and exit)
            taken = fork_lock_app.LOCKS[name]().acquire(timeout=2)
            os.write(writing, b"taken" if taken else b"held")
            os._exit(0)
        os.close(writing)
        with os.fdopen(reading, "rb") as answer:
            said = answer.read()
        os.waitpid(pid, 0)
    finally:
        release.set()
        holder.join(timeout=30)
    assert said == b"taken"
