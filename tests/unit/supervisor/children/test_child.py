"""Child state bookkeeping: messages, silence, exit classification, stuck jobs, the roster."""

from __future__ import annotations

import signal

from cogworker import exitcodes
from supervisor.children.child import Child, Phase, classify_exit
from supervisor.children.roster import Roster
from supervisor.wire.child_lines import Message


def make(pid: int = 100, slot: int = 0, *, at: float = 0.0, generation: int = 0) -> Child:
    return Child(pid, slot, f"h:{pid}:n", -1, started_at=at, last_heard=at, generation=generation)


def ready(child: Child) -> Child:
    child.apply(Message("booted"), 0)
    child.apply(Message("ready"), 0)
    return child


# Messages --------------------------------------------------------------------------------------
def test_messages_move_a_child_through_its_phases_and_count_as_life() -> None:
    child = make()
    assert child.phase is Phase.FORKED and not child.handles_signals
    assert child.apply(Message("booted", {"pid": 100}), 5.0) is Phase.FORKED
    assert child.phase is Phase.BOOTING and child.handles_signals
    assert child.last_heard == 5.0
    child.apply(Message("ready"), 6.0)
    assert child.phase is Phase.READY
    child.apply(Message("status", {"busy": 2, "threads": 4, "quiet": True, "redis": "up"}), 7.0)
    assert child.status["busy"] == 2 and child.quiet
    assert child.silent_for(9.5) == 2.5
    child.apply(Message("stopping"), 8.0)
    assert child.phase is Phase.STOPPING and child.stopping
    child.apply(Message("stopped", {"code": 0}), 9.0)
    assert child.exit_code == 0


def test_status_while_waiting_for_redis_is_booting_not_ready() -> None:
    child = make()
    child.apply(Message("status", {"redis": "down", "booting": True}), 1.0)
    assert child.phase is Phase.BOOTING
    child.apply(Message("ready"), 2.0)
    assert child.phase is Phase.READY


def test_late_or_unknown_messages_do_not_move_a_stopping_child_back() -> None:
    child = ready(make())
    child.apply(Message("stopping"), 1.0)
    child.apply(Message("ready"), 2.0)
    child.apply(Message("something_new", {"x": 1}), 3.0)
    assert child.phase is Phase.STOPPING
    assert child.last_heard == 3.0


def test_boot_error_is_remembered() -> None:
    child = make()
    child.apply(Message("boot_error", {"error": "COGWORKER_REQUIRE: can't import 'x'"}), 1.0)
    assert child.boot_error == "COGWORKER_REQUIRE: can't import 'x'"


# Exits -----------------------------------------------------------------------------------------
def test_exit_classification() -> None:
    child = ready(make())
    assert classify_exit(child, 0).reason == "exit" and classify_exit(child, 0).clean
    assert classify_exit(child, 1).reason == "crash" and classify_exit(child, 1).jobs_stranded
    killed = classify_exit(child, -signal.SIGKILL)
    assert killed.reason == "signal" and killed.jobs_stranded and killed.signal_name == "SIGKILL"
    assert not classify_exit(child, -signal.SIGTERM).clean  # nobody asked it to stop
    boot = classify_exit(make(), exitcodes.BOOT_ERROR)
    assert boot.boot_error and boot.reason == "boot_error"


def test_exits_we_asked_for_are_clean_and_named_by_why() -> None:
    child = ready(make())
    child.term_sent_at = 1.0
    assert classify_exit(child, 0).reason == "stop"
    # TERMed before run_worker installed its handlers: the default action, no job held yet.
    early = make()
    early.term_sent_at = 1.0
    assert classify_exit(early, -signal.SIGTERM).clean
    child.retire_reason = "memory"
    assert classify_exit(child, 0).reason == "memory"


def test_exits_after_our_sigkill_carry_its_reason_and_requeue() -> None:
    child = ready(make())
    child.term_sent_at = 1.0
    child.kill_reason = "straggler"
    outcome = classify_exit(child, -signal.SIGKILL)
    assert outcome.reason == "straggler" and outcome.jobs_stranded and not outcome.clean


# Roster ----------------------------------------------------------------------------------------
def test_roster_tracks_current_children_and_ready_capacity() -> None:
    roster = Roster(2)
    a, b = ready(make(1, 0)), make(2, 1)
    roster.add(a, current=True)
    roster.add(b, current=True)
    assert roster.ready == 1
    assert roster.vacant_slots() == []
    ready(b)
    assert roster.ready == 2
    b.retire_reason = "restart"
    assert roster.ready == 1
    child, was_current = roster.pop(2)
    assert child is b and was_current
    assert roster.vacant_slots() == [1]
    assert roster.pop(2) == (None, False)


def test_promoting_a_replacement_keeps_capacity_and_demotes_the_old_child() -> None:
    roster = Roster(1)
    old = ready(make(1, 0))
    roster.add(old, current=True)
    new = make(2, 0, generation=1)
    new.replaces = 1
    roster.add(new, current=False)
    assert roster.replacement_for(0) is new
    assert roster.current(0) is old and roster.ready == 1
    ready(new)
    assert roster.promote(new) is old
    old.retire_reason = "restart"
    assert roster.current(0) is new and roster.ready == 1
    assert roster.replacement_for(0) is None
    assert roster.pop(1) == (old, False)  # the old child's exit is not its slot's loss


# Stuck jobs ------------------------------------------------------------------------------------
def test_a_stuck_line_is_counted_with_the_job_it_names() -> None:
    child = ready(make())
    child.apply(Message("stuck", {"jid": "j1", "job": "app.hang", "queue": "default"}), 1.0)
    child.apply(Message("stuck", {"jid": "j2", "job": "app.hang", "queue": "default"}), 2.0)
    assert child.stuck_jobs == 2 and child.last_stuck["jid"] == "j2"
    child.retire_reason, child.term_sent_at = "stuck", 3.0  # replaced for it, then asked to stop
    outcome = classify_exit(child, 0)
    assert outcome.clean and outcome.reason == "stuck" and not outcome.jobs_stranded
