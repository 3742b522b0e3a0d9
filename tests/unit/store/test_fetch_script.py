"""fetch.lua's batch paths, against a real Redis: several acknowledgements come off the in-progress
list with one LRANGE + LTRIM (+ one RPUSH for a job still running among them), and several jobs move
with LRANGE + LPUSH + LTRIM, in exactly the order and with exactly the effect of the one-at-a-time
commands they replace (LREM per ack, LMOVE per job). A move Redis refuses (LMOVE renamed away) is
not a queue of the wrong type: the script stops there and says so, with the jobs it moved before."""

from __future__ import annotations

import pytest
import redis

from cogworker.store import keys
from cogworker.store.scripts import Scripts
from tests.support.redis_server import RedisServer

INPROGRESS = keys.in_progress("me:1:fetch")


def fetch(
    r: redis.Redis, want: int, acks: list[str], queues: tuple[str, ...] = ("default",), isolating: str = ""
) -> list[object]:
    script_keys = [INPROGRESS, keys.PAUSED, keys.STAT_PROCESSED, keys.stat_processed_day("20261201")]
    script_keys += [keys.queue(q) for q in queues] + [keys.suspects(q) for q in queues]
    args: list[object] = [want, len(acks), *acks, len(queues), *queues, isolating]
    return list(Scripts(r).run("fetch", script_keys, args))


def moved(reply: list[object]) -> list[str]:
    n_bad = int(reply[2])  # type: ignore[call-overload]
    return [str(raw) for raw in reply[5 + n_bad + 1 :: 2]]


def one_at_a_time(r: redis.Redis, want: int, acks: list[str]) -> tuple[int, list[str]]:
    """What the script replaces: LREM per acknowledgement, LMOVE per job."""
    acked = sum(int(r.lrem(INPROGRESS, -1, raw)) for raw in acks)
    got: list[str] = []
    while len(got) < want:
        raw = r.lmove(keys.queue("default"), INPROGRESS, "RIGHT", "LEFT")
        if raw is None:
            break
        got.append(str(raw))
    return acked, got


@pytest.mark.parametrize(
    ("listed", "acks", "want"),
    [
        (list("abcdef"), list("fed"), 0),  # the three oldest: trimmed off the tail
        (list("abcdef"), list("fdc"), 4),  # one still running among them (e) goes back in place
        (list("abcdef"), list("abf"), 2),  # two outside the window's acknowledged stretch
        (list("aabbc"), list("cba"), 3),  # copies of one payload: the oldest copy goes first
        (list("abc"), list("xyz"), 5),  # acknowledgements of jobs no longer listed count nothing
        (list("abcdefghijklmnopqrst"), list("tsrqa"), 1),  # one far from the tail: an LREM
    ],
)
def test_batch_paths_do_what_one_command_per_job_did(
    r: redis.Redis, listed: list[str], acks: list[str], want: int
) -> None:
    queued = [f"job{i}" for i in range(6)]

    def setup() -> None:
        r.delete(INPROGRESS, keys.queue("default"), keys.STAT_PROCESSED)
        if listed:
            r.rpush(INPROGRESS, *listed)
        r.rpush(keys.queue("default"), *queued)

    setup()
    expected_acked, expected_moved = one_at_a_time(r, want, acks)
    expected_list = r.lrange(INPROGRESS, 0, -1)
    expected_queue = r.lrange(keys.queue("default"), 0, -1)

    setup()
    reply = fetch(r, want, acks)
    assert int(reply[0]) == expected_acked  # type: ignore[call-overload]
    assert moved(reply) == expected_moved
    assert r.lrange(INPROGRESS, 0, -1) == expected_list
    assert r.lrange(keys.queue("default"), 0, -1) == expected_queue
    assert int(r.get(keys.STAT_PROCESSED) or 0) == expected_acked


def test_large_acknowledgements_are_taken_off_in_place_not_copied_through_the_script(r: redis.Redis) -> None:
    """The tail window reads its entries into the script (a copy of each payload, and one more of
    each it keeps back): above 2 KB a payload on average, each acknowledgement is an LREM instead."""
    small = [f"s{i}" for i in range(4)]
    large = [f"{i}" * 10_000 for i in range(4)]
    for payloads, lranges, lrems in ((small, 1, 0), (large, 0, 4)):
        r.delete(INPROGRESS)
        r.rpush(INPROGRESS, *payloads)
        r.config_resetstat()
        reply = fetch(r, 0, list(reversed(payloads)))
        stats = r.info("commandstats")
        assert int(reply[0]) == 4  # type: ignore[call-overload]
        assert stats.get("cmdstat_lrange", {}).get("calls", 0) == lranges
        assert stats.get("cmdstat_lrem", {}).get("calls", 0) == lrems
        assert r.llen(INPROGRESS) == 0


def test_a_batch_move_spans_queues_in_order_and_stops_at_the_limit(r: redis.Redis) -> None:
    r.rpush(keys.queue("a"), "a1", "a2")
    r.rpush(keys.queue("b"), "b1", "b2", "b3", "b4", "b5")
    reply = fetch(r, 5, [], queues=("a", "b"))
    # LPUSH-ed jobs are popped from the right: a2 is the oldest of a.
    assert moved(reply) == ["a2", "a1", "b5", "b4", "b3"]
    assert r.lrange(keys.queue("b"), 0, -1) == ["b1", "b2"]
    assert r.lrange(INPROGRESS, 0, -1) == ["b3", "b4", "b5", "a1", "a2"]


def test_a_batch_move_onto_a_list_of_the_wrong_type_moves_nothing(r: redis.Redis) -> None:
    r.set(INPROGRESS, "not a list")
    r.rpush(keys.queue("default"), "j1", "j2", "j3", "j4")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        fetch(r, 4, [])
    assert r.lrange(keys.queue("default"), 0, -1) == ["j1", "j2", "j3", "j4"]


def test_a_batch_move_from_a_queue_of_the_wrong_type_names_it_and_takes_the_next(r: redis.Redis) -> None:
    r.set(keys.queue("a"), "not a list")
    r.rpush(keys.queue("b"), "b1", "b2", "b3")
    reply = fetch(r, 3, [], queues=("a", "b"))
    assert int(reply[2]) == 1 and reply[5] == keys.queue("a")  # type: ignore[call-overload]
    assert reply[4] == ""  # a wrong type is not a refusal
    assert moved(reply) == ["b3", "b2", "b1"]
    assert r.get(keys.queue("a")) == "not a list"


def test_a_waiting_suspect_is_taken_alone_once_the_list_is_empty(r: redis.Redis) -> None:
    r.rpush(keys.queue("default"), "q3", "q2", "q1")
    r.rpush(keys.suspects("default"), "s1")
    r.rpush(INPROGRESS, "running")
    reply = fetch(r, 4, [])
    # Something else still runs here: nothing new, so the list empties (mode 2).
    assert reply[3] == 2 and moved(reply) == []
    reply = fetch(r, 4, ["running"])
    assert reply[:4] == [1, 0, 0, 1] and moved(reply) == ["s1"]
    assert reply[5] == keys.queue("default")  # the queue the suspect belongs to
    assert r.lrange(INPROGRESS, 0, -1) == ["s1"] and r.llen(keys.queue("default")) == 3
    # While it runs, nothing else is taken, though the queue has jobs and the suspects list is empty.
    assert fetch(r, 4, [], isolating="1")[3:] == [1, ""]
    # Once it has left the list, an ordinary fetch.
    reply = fetch(r, 4, ["s1"], isolating="1")
    assert reply[3] == 0 and moved(reply) == ["q1", "q2", "q3"]


def test_a_suspect_of_a_paused_queue_waits_and_a_wrong_type_suspects_key_is_named(r: redis.Redis) -> None:
    r.sadd(keys.PAUSED, "a")
    r.rpush(keys.suspects("a"), "sa")
    r.set(keys.suspects("b"), "not a list")
    r.rpush(keys.queue("b"), "b1")
    reply = fetch(r, 2, [], queues=("a", "b"))
    assert reply[2:6] == [1, 0, "", keys.suspects("b")] and moved(reply) == ["b1"]
    assert r.lrange(keys.suspects("a"), 0, -1) == ["sa"]


def test_a_refused_lmove_stops_the_moves_and_is_returned_with_the_jobs_moved_before_it() -> None:
    server = RedisServer(extra=("--rename-command", "LMOVE", ""))
    try:
        r = server.client()
        r.rpush(keys.queue("a"), "a1", "a2", "a3")  # taken by the batch path (no LMOVE)
        r.rpush(keys.queue("b"), "b1", "b2")  # one more wanted from it: LMOVE, refused
        r.rpush(INPROGRESS, "done")
        reply = fetch(r, 4, ["done"], queues=("a", "b", "c"))
        assert int(reply[0]) == 1  # type: ignore[call-overload]
        assert int(reply[2]) == 0 and "Unknown Redis command" in str(reply[4])  # type: ignore[call-overload]
        assert moved(reply) == ["a3", "a2", "a1"]
        assert r.lrange(INPROGRESS, 0, -1) == ["a1", "a2", "a3"]
        assert r.lrange(keys.queue("b"), 0, -1) == ["b1", "b2"]
        assert r.get(keys.GUARD_REQUESTS) is None
    finally:
        server.close()


def inner_commands(r: redis.Redis) -> dict[str, int]:
    """Commands Redis ran since the last CONFIG RESETSTAT (a script's own commands count by name)."""
    stats = r.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info"}


MANY_QUEUES = tuple(f"q{i:04d}" for i in range(1_000))


def test_a_fetch_from_many_mostly_empty_queues_costs_a_command_per_skim_not_per_queue(r: redis.Redis) -> None:
    # Issue 38: an LLEN of every suspects list and a move per empty queue made a fetch from 1,000
    # queues cost 2,000 commands, most of them on keys that don't exist.
    r.rpush(keys.queue("q0005"), "early")
    r.rpush(keys.queue("q0700"), "late2", "late1")
    r.config_resetstat()
    reply = fetch(r, 5, [], queues=MANY_QUEUES)
    calls = inner_commands(r)
    # In the queues' order, as a command per queue would take them.
    assert moved(reply) == ["early", "late1", "late2"]
    assert r.lrange(INPROGRESS, 0, -1) == ["late2", "late1", "early"]
    assert calls.get("llen", 0) == 1  # our own list's; no suspects list's
    # About one EXISTS per 32 empty queues, six to find each queue with jobs, three to move its jobs,
    # and the few every fetch costs (LLEN, SMEMBERS, the suspects' EXISTS, this test's RESETSTAT).
    assert sum(calls.values()) <= 1_000 // 32 + 2 * (6 + 3) + 4 + 2, calls


def test_a_suspect_on_the_last_of_many_queues_is_still_seen(r: redis.Redis) -> None:
    r.rpush(keys.queue("q0000"), "ordinary")
    r.rpush(keys.suspects("q0999"), "suspect")
    reply = fetch(r, 4, [], queues=MANY_QUEUES)
    assert reply[3] == 1 and moved(reply) == ["suspect"]
    assert reply[5] == keys.queue("q0999")
    assert r.lrange(keys.queue("q0000"), 0, -1) == ["ordinary"]


def test_a_wrong_type_queue_among_empty_ones_is_named_not_skimmed_over(r: redis.Redis) -> None:
    r.set(keys.queue("q0040"), "not a list")
    r.rpush(keys.queue("q0900"), "j1")
    reply = fetch(r, 2, [], queues=MANY_QUEUES)
    assert int(reply[2]) == 1 and reply[5] == keys.queue("q0040")  # type: ignore[call-overload]
    assert moved(reply) == ["j1"]
