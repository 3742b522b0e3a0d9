"""The pytest plugin (cogworker/pytest_plugin.py), as a user's suite meets it: pytester runs real test
files in a fresh pytest process, where the plugin is loaded through its `pytest11` entry point alone,
and the tests check their outcomes: the fixtures work, a job's failure fails its test, the private
Redis is the session's, emptied per test and stopped afterwards, and a suite that uses no fixture
never imports the job API or the Redis client."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.support.paths import ROOT

pytest_plugins = ["pytester"]

JOBS = """
from cogworker import job

SENT = []


@job
def send(n: int) -> None:
    SENT.append(n)
    if n < 3:
        send.perform_async(n + 1)


@job
async def send_later(n: int) -> None:
    SENT.append(-n)


@job(retry=False)
def boom() -> None:
    raise ValueError("boom from the job")
"""

USES_EVERY_FIXTURE = """
import json
import os

import redis
import shop_jobs
from cogworker import testing

URLS = []


def test_fake_records_and_drain_runs(cogworker_fake):
    shop_jobs.SENT.clear()
    shop_jobs.send.perform_async(1)
    assert [job["args"] for job in shop_jobs.send.jobs] == [[1]]
    assert shop_jobs.SENT == []
    cogworker_fake.drain_all()
    assert shop_jobs.SENT == [1, 2, 3]


def test_fake_forgets_what_the_last_test_recorded(cogworker_fake):
    assert shop_jobs.send.jobs == [] and testing.mode == "fake"


def test_inline_runs_jobs_at_once(cogworker_inline):
    shop_jobs.SENT.clear()
    shop_jobs.send.perform_async(2)
    shop_jobs.send_later.perform_async(7)
    assert shop_jobs.SENT == [2, 3, -7]


def test_inline_a_failing_job_fails_the_test(cogworker_inline):
    shop_jobs.boom.perform_async()


def test_no_mode_is_left_on():
    assert testing.mode is None


def test_a_private_redis(cogworker_redis_url):
    URLS.append(cogworker_redis_url)
    assert cogworker_redis_url.startswith("redis://127.0.0.1:")
    assert not cogworker_redis_url.endswith(":6379/0")
    redis.Redis.from_url(cogworker_redis_url).set("left", "over")
    with open(os.environ["URL_FILE"], "w") as out:
        out.write(cogworker_redis_url)


def test_the_same_redis_emptied_for_each_test(cogworker_redis_url):
    assert URLS == [cogworker_redis_url]
    assert redis.Redis.from_url(cogworker_redis_url).dbsize() == 0


def test_pushes_go_to_the_private_redis(cogworker_redis):
    jid = shop_jobs.send.perform_async(5)
    assert json.loads(cogworker_redis.lindex("cogworker:queue:default", 0))["jid"] == jid
"""

USES_NONE = """
import sys


def test_the_plugin_is_loaded_and_imported_nothing_heavy():
    assert "cogworker.pytest_plugin" in sys.modules
    heavy = ("redis", "pydantic", "structlog", "cogworker.testing", "cogworker.api.client")
    assert [name for name in heavy if name in sys.modules] == []
"""


def test_the_fixtures_in_a_user_s_suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(shop_jobs=JOBS, test_shop=USES_EVERY_FIXTURE)
    url_file = pytester.path / "url.txt"
    monkeypatch.setenv("URL_FILE", str(url_file))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=7, failed=1)
    result.stdout.fnmatch_lines(
        ["*test_inline_a_failing_job_fails_the_test*", "*ValueError: boom from the job*"]
    )
    # The session's redis-server is gone with the session.
    port = int(url_file.read_text().rsplit(":", 1)[1].split("/")[0])
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass


def test_the_testing_page_s_fixtures_example(pytester: pytest.Pytester) -> None:
    """docs/guide/testing.md's example, with the jobs page's mailer, as a user's suite."""
    examples = ROOT / "docs" / "examples"
    for source in (
        examples / "jobs" / "mailer.py",
        examples / "testing" / "test_signup_fixtures.py",
    ):
        (pytester.path / source.name).write_text(source.read_text())
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=3)


def test_the_plugin_loads_cheaply(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_light=USES_NONE)
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_without_redis_server_on_path_the_redis_tests_fail_saying_so(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytester.makepyfile(
        test_needs_redis="def test_it(cogworker_redis_url):\n    pass\n\ndef test_other():\n    pass\n"
    )
    monkeypatch.setenv("PATH", str(tmp_path))  # pytester starts sys.executable by its full path
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*cogworker_redis_url starts a private redis-server, and none is on PATH*"])
