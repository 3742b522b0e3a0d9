"""`cogworker retry|scheduled|dead ...` in-process against a real Redis."""

from __future__ import annotations

import io
import json

import pytest
import redis

from cogworker import codec
from cogworker.api.backtrace import encode as encode_backtrace
from tests.support.cli_runner import CLI, FakeTerminal, cli_fixture  # noqa: F401
from tests.support.set_entries import add, dead_job


def test_list_show_and_retry_a_dead_job(cli: CLI, r: redis.Redis) -> None:
    add(r, "cogworker:dead", dead_job("j1", error_message="smtp down"), 100)
    add(r, "cogworker:dead", dead_job("j2", queue="other"), 200)

    listing = cli("dead", "list")
    assert listing.code == 0
    assert "dead: 2 entries, 2 shown" in listing.out
    assert listing.out.index("j2") < listing.out.index("j1")  # newest death first
    assert "ValueError: smtp down" in listing.out

    data = cli("dead", "list", "--queue", "other", "--json").json()
    assert data["size"] == 2
    assert [e["jid"] for e in data["entries"]] == ["j2"]
    assert cli("dead", "list", "--error", "smtp", "--json").json()["entries"][0]["jid"] == "j1"
    assert cli("dead", "list", "--job", "nomatch").out.startswith("dead: 2 entries, nothing matches")

    shown = cli("dead", "show", "j1")
    assert shown.code == 0 and '"error_message": "smtp down"' in shown.out
    assert cli("dead", "show", "j1", "--json").json()["payload"]["jid"] == "j1"

    retried = cli("dead", "retry", "j1")
    assert retried.code == 0, retried.err
    assert "j1 (demo_jobs.boom) moved from dead to queue default" in retried.out
    assert json.loads(r.lindex("cogworker:queue:default", 0))["jid"] == "j1"

    again = cli("dead", "retry", "j1")
    assert again.code == 1
    assert again.err.strip() == "cogworker: no job j1 in the dead set"


def test_show_prints_the_backtrace_decoded_whichever_field_holds_it(cli: CLI, r: redis.Redis) -> None:
    trace = ["Traceback (most recent call last):", "ValueError: smtp down"]
    add(r, "cogworker:dead", dead_job("new", error_backtrace=encode_backtrace(trace)), 100)
    add(r, "cogworker:dead", dead_job("old", backtrace=trace), 200)  # filed by an older cogworker
    for jid in ("new", "old"):
        shown = cli("dead", "show", jid)
        assert shown.code == 0
        assert (
            "  backtrace:\n    Traceback (most recent call last):\n    ValueError: smtp down\n" in shown.out
        )
        assert cli("dead", "show", jid, "--json").json()["backtrace"] == trace
    assert cli("dead", "show", "new", "--json").json()["payload"]["error_backtrace"] == encode_backtrace(
        trace
    )


def test_an_unreadable_dead_entry_is_shown_but_not_retried(cli: CLI, r: redis.Redis) -> None:
    add(r, "cogworker:dead", "{broken")
    ref = cli("dead", "list", "--json").json()["entries"][0]["ref"]
    assert ref.startswith("raw-")
    assert "{broken" in cli("dead", "show", ref).out
    refused = cli("dead", "retry", ref)
    assert refused.code == 1
    assert "can't be retried: its payload is unreadable" in refused.err
    assert r.zcard("cogworker:dead") == 1


def test_deletes_ask_first(cli: CLI, r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    add(r, "cogworker:retry", dead_job("a"), 1)
    add(r, "cogworker:retry", dead_job("b"), 2)
    add(r, "cogworker:retry", dead_job("c", queue="q2"), 3)

    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    refused = cli("retry", "delete", "a")
    assert refused.code == 2
    assert "pass --yes" in refused.err
    assert r.zcard("cogworker:retry") == 3

    monkeypatch.setattr("sys.stdin", FakeTerminal("n\n"))
    aborted = cli("retry", "delete-all")
    assert aborted.code == 1 and "aborted" in aborted.err
    assert "Delete every entry (3) of the retry set? [y/N]" in aborted.err

    monkeypatch.setattr("sys.stdin", FakeTerminal("y\n"))
    assert cli("retry", "delete", "a").code == 0
    assert cli("retry", "delete", "a", "--yes").code == 1  # gone

    deleted = cli("retry", "delete-all", "--queue", "q2", "--yes", "--json")
    assert deleted.json() == {"set": "retry", "deleted": 1, "gone": 0}
    assert [e.split('"jid":"')[1][:1] for e in r.zrange("cogworker:retry", 0, -1)] == ["b"]


def test_retry_all_and_the_scheduled_enqueue_alias(cli: CLI, r: redis.Redis) -> None:
    add(r, "cogworker:retry", dead_job("a"), 1)
    add(r, "cogworker:retry", "junk", 2)
    out = cli("retry", "retry-all", "--yes")
    assert out.code == 0
    assert "1 job(s) moved from retry to their queues" in out.out
    assert "1 unreadable" in out.out
    job = {"class": "demo_jobs.record", "args": ["s"], "jid": "s1", "queue": "default", "at": 9e9}
    add(r, "cogworker:schedule", job, 9e9)
    assert cli("scheduled", "enqueue", "s1", "--json").json()["retried"] is True
    assert r.llen("cogworker:queue:default") == 2
    add(r, "cogworker:schedule", codec.dumps({**job, "jid": "s2"}), 9e9)
    assert cli("scheduled", "enqueue-all", "--yes", "--json").json()["retried"] == 1


def test_help_names_the_actions(cli: CLI) -> None:
    out = cli("dead", "--help")
    assert out.code == 0
    for action in ("list", "show JID", "retry JID", "delete JID", "retry-all", "delete-all", "Retry Now"):
        assert action in out.out
    assert cli("dead").code == 2  # an action is required
    assert cli().code == 2  # a verb is required
    assert cli("nonsense").code == 2
    assert cli("dead", "list", "--limit", "0").code == 2


def test_delete_a_dead_job_and_list_scheduled_ones(cli: CLI, r: redis.Redis) -> None:
    add(r, "cogworker:dead", dead_job("gone"), 100)
    add(r, "cogworker:dead", dead_job("kept"), 200)
    assert cli("dead", "delete", "gone", "--yes").code == 0
    assert [json.loads(e)["jid"] for e in r.zrange("cogworker:dead", 0, -1)] == ["kept"]
    add(r, "cogworker:schedule", dead_job("later"), 4_000_000_000)
    listing = cli("scheduled", "list", "--json").json()
    assert [e["jid"] for e in listing["entries"]] == ["later"]
