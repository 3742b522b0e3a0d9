"""Respawn backoff with an injected clock: minutes of crashes, stepped through instantly."""

from __future__ import annotations

import pytest

from supervisor.restart_policy.backoff import RespawnBackoff


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


def backoff(clock: Clock) -> RespawnBackoff:
    return RespawnBackoff(clock, healthy_uptime_s=30, base_delay_s=1, max_delay_s=60)


def crash_after(b: RespawnBackoff, clock: Clock, slot: int, uptime: float) -> float:
    b.started(slot)
    clock.advance(uptime)
    return b.crashed(slot).delay_s


def test_slot_dying_young_waits_one_second_doubling_to_sixty(clock: Clock) -> None:
    b = backoff(clock)
    delays = [crash_after(b, clock, 0, 0.5) for _ in range(10)]
    assert delays == [0, 1, 2, 4, 8, 16, 32, 60, 60, 60]


def test_first_crash_after_a_healthy_run_respawns_at_once_then_backs_off(clock: Clock) -> None:
    b = backoff(clock)
    for _ in range(5):
        crash_after(b, clock, 0, 1)
    assert crash_after(b, clock, 0, 30) == 0  # healthy run: the streak starts over
    assert crash_after(b, clock, 0, 1) == 1
    assert crash_after(b, clock, 0, 1) == 2
    assert b.crashed(0).streak == 4  # no new start recorded: uptime 0, still young


def test_slots_back_off_independently(clock: Clock) -> None:
    b = backoff(clock)
    crash_after(b, clock, 0, 1)
    crash_after(b, clock, 0, 1)
    assert crash_after(b, clock, 0, 1) == 2
    assert crash_after(b, clock, 1, 1) == 0


def test_due_returns_each_slot_once_when_its_delay_has_passed(clock: Clock) -> None:
    b = backoff(clock)
    crash_after(b, clock, 0, 1)  # delay 0
    assert b.due() == [0]
    assert b.due() == []
    crash_after(b, clock, 0, 1)  # delay 1
    assert b.is_waiting(0)
    assert b.due() == []
    assert b.next_due_in() == pytest.approx(1.0)
    clock.advance(0.99)
    assert b.due() == []
    clock.advance(0.01)
    assert b.due() == [0]
    assert b.next_due_in() is None


def test_started_cancels_a_pending_respawn_and_cancel_all_clears(clock: Clock) -> None:
    b = backoff(clock)
    crash_after(b, clock, 0, 1)
    crash_after(b, clock, 1, 1)
    b.started(0)
    assert b.waiting() == {1: 0.0}
    b.cancel_all()
    assert b.due() == []


def test_schedule_now_is_no_crash(clock: Clock) -> None:
    b = backoff(clock)
    crash_after(b, clock, 0, 1)
    crash_after(b, clock, 0, 1)
    b.due()
    b.started(0)
    b.schedule_now(0)
    assert b.due() == [0]
    clock.advance(1)
    assert b.crashed(0).streak == 3  # the restart in place did not reset or extend the streak


def test_failed_fork_never_retries_at_once(clock: Clock) -> None:
    b = backoff(clock)
    assert b.fork_failed(0) == 1
    assert b.due() == []
    clock.advance(1)
    assert b.due() == [0]


def test_settings_shorten_everything(clock: Clock) -> None:
    b = RespawnBackoff(clock, healthy_uptime_s=0.5, base_delay_s=0.1, max_delay_s=0.3)
    assert [crash_after(b, clock, 0, 0.1) for _ in range(5)] == [0, 0.1, 0.2, 0.3, 0.3]
    assert crash_after(b, clock, 0, 0.5) == 0
