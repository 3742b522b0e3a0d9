"""`cogworker deploy-mark LABEL [--at] [--by] [--json]`: the marker written (once however often),
its line and JSON, a bad label or time refused with exit 2 and nothing written, and the same from
`cogworker.deploy_mark` with markers past the keep trimmed."""

from __future__ import annotations

import json
import time

import pytest
import redis

import cogworker
from cogworker.cli.deploy_mark import parse_time
from cogworker.settings import Settings
from cogworker.store import key_guard, keys
from cogworker.store import metrics_layout as layout
from tests.support.cli_runner import CLI, cli_fixture  # noqa: F401


def test_a_marker_is_written_once_with_its_time_and_author(r: redis.Redis, cli: CLI) -> None:
    done = cli("deploy-mark", "v1.2", "--at", "2026-12-03T14:05:00+01:00", "--by", "ci")
    assert done.code == 0
    assert done.out.strip() == "deploy marker 'v1.2' at 2026-12-03T13:05:00+00:00 by ci"
    again = cli("deploy-mark", "v1.2", "--at", "1796303100", "--by", "ci", "--json")
    assert again.code == 0
    assert again.json() == {"at": 1796303100.0, "label": "v1.2", "by": "ci"}
    [(member, score)] = r.zrange(layout.marks_key(), 0, -1, withscores=True)
    assert json.loads(member) == {"at": 1796303100.0, "label": "v1.2", "by": "ci"}
    assert score == 1796303100.0


def test_now_by_default_and_a_time_without_zone_is_utc(r: redis.Redis, cli: CLI) -> None:
    before = time.time()
    assert cli("deploy-mark", "v2").code == 0
    [(_, score)] = r.zrange(layout.marks_key(), 0, -1, withscores=True)
    assert before - 1 <= score <= time.time() + 1
    assert parse_time("2026-12-03T13:05:00") == 1796303100.0


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["  "], "needs a label"),
        (["x" * 201], "at most 200"),
        (["v1", "--at", "yesterday"], "ISO-8601"),
        (["v1", "--at", "-5"], "above 0"),
        (["v1", "--by", "y" * 101], "at most 100"),
    ],
)
def test_a_bad_label_or_time_is_refused_with_nothing_written(
    r: redis.Redis, cli: CLI, args: list[str], says: str
) -> None:
    done = cli("deploy-mark", *args)
    assert done.code == 2
    assert says in done.err
    assert not r.exists(layout.marks_key())


def test_the_api_trims_markers_past_the_keep(r: redis.Redis, configured: Settings) -> None:
    now = time.time()
    cogworker.deploy_mark("old", at=now - layout.MARKS_KEEP_S - 60, by="a")
    cogworker.deploy_mark("recent", at=now - 60, by="a")
    cogworker.deploy_mark("new", by="a")
    labels = [json.loads(m)["label"] for m in r.zrange(layout.marks_key(), 0, -1)]
    assert labels == ["recent", "new"]


def test_a_wrong_type_markers_key_raises_and_asks_the_guard(r: redis.Redis, configured: Settings) -> None:
    r.set(layout.marks_key(), "not a zset")
    with pytest.raises(key_guard.WrongTypeKey) as caught:
        cogworker.deploy_mark("v1")
    assert caught.value.key == layout.marks_key() and caught.value.found == "string"
    assert layout.marks_key() in r.smembers(keys.GUARD_REQUESTS)
    assert key_guard.expected_type(layout.marks_key()) == "zset"


def test_the_api_marks_now_and_returns_the_marker(r: redis.Redis, configured: Settings) -> None:
    before = time.time()
    mark = cogworker.deploy_mark("v1.2", by="ci")
    assert mark["label"] == "v1.2" and mark["by"] == "ci"
    assert before - 1 <= mark["at"] <= time.time() + 1
    [(member, score)] = r.zrange(layout.marks_key(), 0, -1, withscores=True)
    assert json.loads(member) == mark and score == mark["at"]
