"""`cogworker retry|scheduled kill`: entries moved to dead in one script (written first, taken out
only if still there), exactly once when two operators race, with their locks released."""

from __future__ import annotations

import json

import redis

from cogworker import codec
from cogworker.ops import set_actions
from cogworker.ops import sets as set_ops
from cogworker.settings import Settings
from cogworker.store import keys
from cogworker.store.locks import held_locks
from cogworker.store.scripts import Scripts
from tests.support.cli_runner import CLI, cli_fixture  # noqa: F401
from tests.support.set_entries import add, dead_job, two_operators


def retry_job(jid: str, **fields: object) -> dict[str, object]:
    job = dead_job(jid, **fields)
    for name in ("died_at",):
        job.pop(name)
    return job


def test_kill_moves_a_retry_entry_to_dead_and_releases_its_lock(r: redis.Redis, settings: Settings) -> None:
    job = retry_job("k1", unique="until_executed", status=True)
    raw = add(r, keys.RETRY, job, 500)
    [(lock_key, owner)] = held_locks(job)
    r.set(lock_key, owner)
    r.hset(keys.status("k1"), mapping={"status": "retrying"})

    entry = set_actions.kill(r, Scripts(r), settings, "retry", "k1")
    assert entry.raw == raw
    assert r.zcard(keys.RETRY) == 0
    [(dead_raw, score)] = r.zrange(keys.DEAD, 0, -1, withscores=True)
    dead = json.loads(dead_raw)
    assert dead["jid"] == "k1" and dead["error_class"] == "ValueError"  # its failure is kept
    assert dead["killed_at"] == score
    assert r.exists(lock_key) == 0
    assert r.hget(keys.status("k1"), "status") == "failed"


def test_a_killed_scheduled_job_says_it_was_killed(r: redis.Redis, settings: Settings) -> None:
    add(r, keys.SCHEDULE, {"class": "demo_jobs.record", "jid": "s1", "queue": "default", "args": ["x"]})
    set_actions.kill(r, Scripts(r), settings, "scheduled", "s1")
    dead = json.loads(r.zrange(keys.DEAD, 0, -1)[0])
    assert dead["error_class"] == set_actions.KILLED
    assert "killed by an operator" in dead["error_message"]


def test_two_operators_killing_one_entry_file_it_once(r: redis.Redis, settings: Settings) -> None:
    for round_ in range(20):
        jid = f"race{round_}"
        add(r, keys.RETRY, retry_job(jid))

        def kill(client: redis.Redis, jid: str = jid) -> str:
            set_actions.kill(client, Scripts(client), settings, "retry", jid)
            return "killed"

        outcomes = two_operators(r, kill)
        assert outcomes == ["killed", "not found"], outcomes
    assert r.zcard(keys.DEAD) == 20 and r.zcard(keys.RETRY) == 0


def test_kill_with_dead_a_string_loses_nothing(r: redis.Redis, settings: Settings) -> None:
    raw = add(r, keys.RETRY, retry_job("w1"))
    r.set(keys.DEAD, "not a sorted set")
    try:
        set_actions.kill(r, Scripts(r), settings, "retry", "w1")
    except set_actions.WrongTypeKey as exc:
        assert "cogworker:dead holds a string, not a sorted set" in str(exc)
    else:
        raise AssertionError("expected WrongTypeKey")
    assert r.zscore(keys.RETRY, raw) == 100


def test_kill_all_with_filters(r: redis.Redis, settings: Settings) -> None:
    for i in range(3):
        add(r, keys.RETRY, retry_job(f"m{i}", queue="mail"))
    add(r, keys.RETRY, retry_job("o1", queue="other"))
    add(r, keys.RETRY, "{unreadable")
    result = set_actions.kill_all(r, Scripts(r), settings, "retry", set_ops.Filter(queue="mail"))
    assert (result.done, result.gone) == (3, 0)
    assert r.zcard(keys.RETRY) == 2
    result = set_actions.kill_all(r, Scripts(r), settings, "retry")
    assert result.done == 2 and r.zcard(keys.RETRY) == 0
    assert "{unreadable" in [json.loads(e).get("raw") for e in r.zrange(keys.DEAD, 0, -1)]


def test_cli_kill(cli: CLI, r: redis.Redis) -> None:
    add(r, keys.RETRY, retry_job("c1"))
    add(r, keys.RETRY, retry_job("c2"))
    add(r, keys.SCHEDULE, retry_job("c3"))

    refused = cli("retry", "kill", "c1")
    assert refused.code == 2 and "pass --yes" in refused.err  # no terminal to ask on
    assert r.zcard(keys.RETRY) == 2

    killed = cli("retry", "kill", "c1", "c2", "--yes", "--json")
    assert killed.code == 0, killed.err
    assert killed.json() == {"set": "retry", "killed": ["c1", "c2"], "gone": []}
    assert r.zcard(keys.RETRY) == 0 and r.zcard(keys.DEAD) == 2

    missing = cli("retry", "kill", "c1", "--yes")
    assert missing.code == 1 and "no job c1 in the retry set" in missing.err

    text = cli("scheduled", "kill", "--all", "--yes")
    assert text.code == 0 and "1 entr(ies) moved from scheduled to dead" in text.out
    assert r.zcard(keys.SCHEDULE) == 0 and r.zcard(keys.DEAD) == 3

    assert cli("retry", "kill", "--yes").code == 2  # neither JIDs nor --all
    assert cli("retry", "kill", "x", "--all", "--yes").code == 2
    assert cli("dead", "kill", "x").code == 2  # dead has no kill action
    assert codec.loads(r.zrange(keys.DEAD, 0, 0)[0])["killed_at"] > 0


def test_delete_all_refuses_a_key_that_isnt_the_set(r: redis.Redis) -> None:
    """MULTI with ZCARD then DEL deleted it anyway (a transaction runs the commands after a failed one)."""
    r.set(keys.RETRY, "not a sorted set")
    try:
        set_actions.delete_all(r, "retry")
    except set_actions.WrongTypeKey as exc:
        assert "cogworker:retry holds a string" in str(exc)
    else:
        raise AssertionError("expected WrongTypeKey")
    assert r.get(keys.RETRY) == "not a sorted set"
    r.delete(keys.RETRY)
    add(r, keys.RETRY, retry_job("y"))
    assert set_actions.delete_all(r, "retry").done == 1 and r.exists(keys.RETRY) == 0
