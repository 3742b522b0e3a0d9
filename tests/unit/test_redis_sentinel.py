"""Sentinel addresses (cogworker/redis_sentinel.py) and the settings that hold them: both forms read
to the same target, bad values stop a command with exit 78 and one line, and no message, repr or
redacted URL shows a password. COGWORKER_REDIS_MIN_REPLICAS is validated here too."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cogworker.redact import safe_url
from cogworker.redis_sentinel import SentinelTarget, parse_hosts, parse_url, target
from cogworker.settings import ConfigError, load_settings
from tests.support.daemon_env import clean_env

PASSWORD = "m/pw#1@x"
ENCODED = "m%2Fpw%231%40x"
SENTINEL_PASSWORD = "sentinel-pw-77"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "redis+sentinel://h1:26379,h2:26380/mymaster",
            SentinelTarget((("h1", 26379), ("h2", 26380)), "mymaster"),
        ),
        (
            f"redis+sentinel://:{ENCODED}@h1,[::1]:5/mymaster/3",
            SentinelTarget((("h1", 26379), ("::1", 5)), "mymaster", None, PASSWORD, 3),
        ),
        (
            "rediss+sentinel://app:pw@h1:1/m/0?x=1",
            SentinelTarget((("h1", 1),), "m", "app", "pw", 0, tls=True),
        ),
        ("redis+sentinel://pw@h1:1/m", SentinelTarget((("h1", 1),), "m", None, "pw")),
    ],
)
def test_urls_read_as_their_parts(url: str, expected: SentinelTarget) -> None:
    found = parse_url(url)
    assert found == expected
    assert found.password == expected.password and found.username == expected.username
    assert PASSWORD not in repr(found)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis+sentinel://h1:26379", "names no master"),
        ("redis+sentinel://h1:26379/", "names no master"),
        ("redis+sentinel://h1:99999/m", "bad port"),
        ("redis+sentinel://h1:x/m", "bad port"),
        ("redis+sentinel://,/m", "names no sentinel"),
        ("redis+sentinel://h1/m/zero", "bad database"),
    ],
)
def test_bad_urls_are_named_without_the_url(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_url(url)


def test_a_sentinel_that_is_not_host_port() -> None:
    with pytest.raises(ValueError, match="not host:port"):
        parse_hosts(":26379")


def test_the_settings_form_reads_the_master_password_and_db_from_the_url() -> None:
    loaded = load_settings(
        redis_url=f"redis://:{ENCODED}@mymaster/2",
        redis_sentinels="h1:1, h2:2",
        redis_sentinel_master="mymaster",
        redis_sentinel_password=SENTINEL_PASSWORD,
    )
    found = target(loaded)
    assert found == SentinelTarget((("h1", 1), ("h2", 2)), "mymaster", None, PASSWORD, 2)
    # The default URL stands for "no password, database 0".
    plain = target(load_settings(redis_sentinels="h1", redis_sentinel_master="m"))
    assert plain == SentinelTarget((("h1", 26379),), "m")
    assert target(load_settings()) is None
    assert SENTINEL_PASSWORD not in repr(loaded) and SENTINEL_PASSWORD not in str(loaded)
    assert PASSWORD not in repr(loaded) and ENCODED not in repr(loaded)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"redis_sentinels": "h1:1"},
            "set both COGWORKER_REDIS_SENTINELS and COGWORKER_REDIS_SENTINEL_MASTER",
        ),
        ({"redis_sentinel_master": "m"}, "set both"),
        (
            {"redis_url": "redis+sentinel://h1/m", "redis_sentinels": "h2"},
            "leave COGWORKER_REDIS_SENTINELS",
        ),
        (
            {
                "redis_url": f"redis://:{ENCODED}@otherhost/0",
                "redis_sentinels": "h1",
                "redis_sentinel_master": "m",
            },
            "its host is the master's name",
        ),
        (
            {"redis_url": "unix:///tmp/r.sock", "redis_sentinels": "h1", "redis_sentinel_master": "m"},
            "needs a redis:// or rediss://",
        ),
        ({"redis_url": f"redis+sentinel://:{ENCODED}@h1:0/m"}, "bad port"),
        ({"redis_min_replicas": -1}, "COGWORKER_REDIS_MIN_REPLICAS"),
        ({"redis_min_replicas": 1, "redis_min_replicas_timeout_s": 5}, "COGWORKER_REDIS_TIMEOUT_S"),
        ({"redis_min_replicas_timeout_s": 0}, "above 0"),
    ],
)
def test_bad_sentinel_and_replica_settings_are_one_line_without_the_password(
    values: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(**values)
    text = str(err.value)
    assert message in text
    assert "\n" not in text
    assert PASSWORD not in text and ENCODED not in text


def test_min_replicas_timeout_may_be_anything_while_min_replicas_is_off() -> None:
    load_settings(redis_min_replicas_timeout_s=10)


def test_a_sentinel_url_is_redacted() -> None:
    shown = safe_url(f"redis+sentinel://app:{ENCODED}@h1:1,h2:2/m/0")
    assert shown == "redis+sentinel://app:***@h1:1,h2:2/m/0"


@pytest.mark.parametrize(
    "env",
    [
        {"COGWORKER_REDIS_MIN_REPLICAS": "-1"},
        {"COGWORKER_REDIS_URL": f"redis+sentinel://:{ENCODED}@h1:1"},
        {"COGWORKER_REDIS_SENTINELS": "h1:1"},
    ],
    ids=["negative-min-replicas", "url-without-master", "sentinels-without-master"],
)
@pytest.mark.parametrize(
    "argv", [["-m", "cogworker", "run"], ["-m", "supervisor.main"]], ids=["run", "swarm"]
)
def test_commands_exit_78_on_a_bad_sentinel_or_replica_setting(env: dict[str, str], argv: list[str]) -> None:
    clean = clean_env(env, COGWORKER_REQUIRE="demo_jobs")
    clean.pop("NOTIFY_SOCKET", None)
    done = subprocess.run([sys.executable, *argv], env=clean, capture_output=True, text=True, timeout=30)
    assert done.returncode == 78, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "configuration error" in lines[0], done.stderr
    assert PASSWORD not in done.stderr and ENCODED not in done.stderr
