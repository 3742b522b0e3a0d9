"""The memory watch with an injected clock and RSS: checked on its interval, off without a limit."""

from __future__ import annotations

from supervisor.restart_policy.memory_watch import MB, MemoryWatch


def test_memory_watch_checks_on_its_interval_and_reports_children_over_the_limit() -> None:
    now = [0.0]
    sizes = {1: 50 * MB, 2: 300 * MB, 3: None}
    watch = MemoryWatch(200, 2.0, lambda: now[0], rss=sizes.get)
    assert not watch.due()
    now[0] = 2.0
    assert watch.due() and not watch.due()
    assert watch.over_limit([1, 2, 3]) == [(2, 300 * MB)]
    off = MemoryWatch(None, 2.0, lambda: now[0])
    now[0] = 10.0
    assert not off.due() and off.next_due_in() is None and off.over_limit([1]) == []
