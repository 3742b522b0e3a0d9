"""Settings: defaults, parsing, and a bad value as one clear line with exit code 78."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cogworker.settings import ConfigError, load_settings, parse_queues
from tests.support.daemon_env import clean_env
from tests.support.paths import ROOT
from tests.support.redis_server import RedisServer


def test_defaults_match_the_design() -> None:
    s = load_settings()
    assert s.redis_url == "redis://localhost:6379/0"
    assert s.queues == "default"
    assert s.concurrency == 10
    assert (s.async_concurrency, s.async_lag_threshold_s) == (100, 0.5)
    assert s.timeout_s == 25
    assert s.graceful_stop_timeout_s == 35
    assert s.maxmem_mb is None
    assert s.preload is False
    assert s.phased_restart is True
    assert s.orphan_threshold_s == 300
    assert s.max_orphanings == 3
    assert s.count >= 1
    assert s.cpu_affinity == "auto"
    assert s.cpu_affinity_probe_interval_s == 60


def test_cpu_affinity_is_auto_none_or_spread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COGWORKER_CPU_AFFINITY", "spread")
    assert load_settings().cpu_affinity == "spread"
    monkeypatch.setenv("COGWORKER_CPU_AFFINITY", "compact")
    with pytest.raises(ConfigError, match=r"COGWORKER_CPU_AFFINITY='compact'.*'auto', 'none' or 'spread'"):
        load_settings()
    # Where the kernel can't pin (macOS has no sched_setaffinity), spread is refused at start; auto,
    # the default, pins only where it can, so it still starts there.
    monkeypatch.setenv("COGWORKER_CPU_AFFINITY", "spread")
    monkeypatch.delattr(os, "sched_setaffinity")
    with pytest.raises(ConfigError, match="can't pin a process to a CPU"):
        load_settings()
    monkeypatch.setenv("COGWORKER_CPU_AFFINITY", "auto")
    assert load_settings().cpu_affinity == "auto"


def test_settings_are_frozen() -> None:
    s = load_settings()
    with pytest.raises(Exception, match="frozen"):
        s.concurrency = 3  # type: ignore[misc]


def test_environment_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COGWORKER_CONCURRENCY", "4")
    monkeypatch.setenv("COGWORKER_QUEUES", "critical:3,default:1")
    monkeypatch.setenv("COGWORKER_PRELOAD", "true")
    s = load_settings()
    assert s.concurrency == 4
    assert s.queue_spec.names == ("critical", "default")
    assert s.queue_spec.weights == (3, 1)
    assert s.preload is True


@pytest.mark.parametrize(
    ("text", "names", "weights"),
    [("a,b,c", ("a", "b", "c"), None), ("a:3,b:1", ("a", "b"), (3, 1)), (" x ", ("x",), None)],
)
def test_queue_syntax(text: str, names: tuple[str, ...], weights: tuple[int, ...] | None) -> None:
    spec = parse_queues(text)
    assert spec.names == names
    assert spec.weights == weights


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("COGWORKER_COUNT", "abc", "COGWORKER_COUNT='abc'"),
        ("COGWORKER_CONCURRENCY", "0", "must be 1 or more"),
        ("COGWORKER_ASYNC_CONCURRENCY", "0", "must be 1 or more"),
        ("COGWORKER_ASYNC_LAG_THRESHOLD_S", "0", "above 0"),
        ("COGWORKER_QUEUES", "a:3,b", "give every queue a weight"),
        ("COGWORKER_QUEUES", "a:x", "whole number"),
        ("COGWORKER_QUEUES", "a,a", "listed twice"),
        ("COGWORKER_REDIS_URL", "http://localhost", "must start with redis://"),
        ("COGWORKER_REDIS_URL", "redis://localhost:99999/0", "bad port"),
        ("COGWORKER_REDIS_URL", "redis://localhost:6379/zero", "bad database"),
        ("COGWORKER_TIMEOUT_S", "-1", "above 0"),
        ("COGWORKER_LOG_FORMAT", "xml", "COGWORKER_LOG_FORMAT"),
    ],
)
def test_bad_values_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert variable in str(err.value)
    assert expected in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("argv", [["-m", "cogworker", "run"], ["-m", "supervisor.main"]])
def test_every_command_exits_78_on_bad_settings(argv: list[str]) -> None:
    env = dict(os.environ, COGWORKER_COUNT="abc", COGWORKER_CONCURRENCY="abc")
    done = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 78, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "COGWORKER_" in lines[0]
    assert "configuration error" in lines[0]


def test_every_setting_is_in_the_example_env_file() -> None:

    from cogworker.settings import Settings

    text = (ROOT / "cogworker" / "deploy_kit" / "cogworker.env.example").read_text()
    missing = [name for name in Settings.model_fields if f"COGWORKER_{name.upper()}" not in text]
    assert missing == []


def test_an_env_file_is_read_as_systemd_reads_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cogworker.env_file import load_env_file

    for name in ("COGWORKER_QUEUES", "COGWORKER_CONCURRENCY", "APP_NOTE", "APP_SECRET"):
        monkeypatch.setenv(name, "from the shell")  # restored after the test; the file's values win
    env_file = tmp_path / "app.env"
    env_file.write_text(
        "# a comment\nCOGWORKER_QUEUES='a:2,b:1'\nCOGWORKER_CONCURRENCY=3\n"
        'APP_NOTE="hello world # not a comment"\nAPP_SECRET=pa$HOME/ss\n'
    )
    load_env_file(str(env_file))
    assert os.environ["APP_NOTE"] == "hello world # not a comment"
    assert os.environ["APP_SECRET"] == "pa$HOME/ss"  # no $VAR expansion
    settings = load_settings()
    assert (settings.queue_spec.names, settings.concurrency) == (("a", "b"), 3)
    with pytest.raises(ConfigError, match=r"nope\.env"):
        load_env_file(str(tmp_path / "nope.env"))


def _fields_of(kind: type) -> list[str]:
    from cogworker.settings import Settings

    return [name for name, info in Settings.model_fields.items() if info.annotation is kind]


def test_every_seconds_setting_is_checked() -> None:
    assert len(_fields_of(float)) >= 20  # the parametrised tests below really cover something


@pytest.mark.parametrize("field", _fields_of(float))
def test_seconds_must_be_finite_above_zero_and_bounded(monkeypatch: pytest.MonkeyPatch, field: str) -> None:
    variable = f"COGWORKER_{field.upper()}"
    for value in ("nan", "NaN", "inf", "-inf", "0", "-1", "1e12"):
        monkeypatch.setenv(variable, value)
        with pytest.raises(ConfigError) as err:
            load_settings()
        assert str(err.value).startswith(f"{variable}="), value
        assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("COGWORKER_PRESENCE_TTL_S", "0.4"),  # EXPIRE 0: a presence that never exists
        ("COGWORKER_PRESENCE_TTL_S", "1.5"),  # EXPIRE 1
        ("COGWORKER_QUARANTINE_TTL_S", "0.5"),
        ("COGWORKER_METRICS_PORT", "0"),
        ("COGWORKER_METRICS_PORT", "70000"),
        ("COGWORKER_CONCURRENCY", "1.5"),
        ("COGWORKER_COUNT", "nan"),
        ("COGWORKER_MAXMEM_MB", "inf"),
        ("COGWORKER_QUEUES", "a b"),
        ("COGWORKER_QUEUES", "a\x01b"),
        ("COGWORKER_QUEUES", "a,,b:x"),
    ],
)
def test_values_an_int_would_truncate_or_ranges_would_break(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert variable in str(err.value)


@pytest.mark.parametrize(
    ("values", "named"),
    [
        (
            {"heartbeat_interval_s": 5, "presence_ttl_s": 5},
            ("COGWORKER_PRESENCE_TTL_S", "COGWORKER_HEARTBEAT_INTERVAL_S"),
        ),
        (
            {"heartbeat_interval_s": 2, "presence_ttl_s": 1},
            ("COGWORKER_PRESENCE_TTL_S", "COGWORKER_HEARTBEAT_INTERVAL_S"),
        ),
        ({"orphan_threshold_s": 60}, ("COGWORKER_ORPHAN_THRESHOLD_S", "COGWORKER_PRESENCE_TTL_S")),
        (
            {"respawn_base_delay_s": 10, "respawn_max_delay_s": 5},
            ("COGWORKER_RESPAWN_BASE_DELAY_S", "COGWORKER_RESPAWN_MAX_DELAY_S"),
        ),
        ({"timeout_s": 40}, ("COGWORKER_GRACEFUL_STOP_TIMEOUT_S=35 must be above COGWORKER_TIMEOUT_S=40",)),
        (
            {"timeout_s": 10, "graceful_stop_timeout_s": 10},
            ("COGWORKER_GRACEFUL_STOP_TIMEOUT_S", "COGWORKER_TIMEOUT_S"),
        ),
    ],
)
def test_settings_that_must_agree(values: dict[str, float], named: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(**values)
    for variable in named:
        assert variable in str(err.value)
    assert "\n" not in str(err.value)
    load_settings(heartbeat_interval_s=0.2, presence_ttl_s=1, orphan_threshold_s=2)  # the tests' quick set


@pytest.mark.parametrize(
    "argv", [["-m", "cogworker", "run"], ["-m", "supervisor.main"]], ids=["run", "swarm"]
)
def test_timeout_nan_exits_78_before_anything_starts(argv: list[str], redis_server: RedisServer) -> None:
    env = clean_env(
        COGWORKER_REDIS_URL=redis_server.url, COGWORKER_REQUIRE="demo_jobs", COGWORKER_TIMEOUT_S="nan"
    )
    env.pop("NOTIFY_SOCKET", None)
    done = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 78, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "COGWORKER_TIMEOUT_S='nan'" in lines[0], done.stderr
    client = redis_server.client()
    assert client.scard("cogworker:processes") == 0  # no worker ever registered
    client.close()


@pytest.mark.parametrize(
    "argv", [["-m", "cogworker", "run"], ["-m", "supervisor.main"]], ids=["run", "swarm"]
)
def test_a_graceful_stop_shorter_than_the_drain_exits_78_before_anything_starts(
    argv: list[str], redis_server: RedisServer
) -> None:
    env = clean_env()
    env.update(
        COGWORKER_REDIS_URL=redis_server.url,
        COGWORKER_REQUIRE="demo_jobs",
        COGWORKER_TIMEOUT_S="30",
        COGWORKER_GRACEFUL_STOP_TIMEOUT_S="10",
    )
    env.pop("NOTIFY_SOCKET", None)
    done = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 78, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == [
        "cogworker: configuration error: COGWORKER_GRACEFUL_STOP_TIMEOUT_S=10 must be above "
        "COGWORKER_TIMEOUT_S=30: a stopping swarm would kill its workers while they still drain, and "
        "jobs that would have finished in time run again"
    ], done.stderr
    client = redis_server.client()
    assert client.scard("cogworker:processes") == 0  # no worker ever registered
    client.close()


def test_a_misspelt_variable_is_named_not_silently_ignored(redis_server: RedisServer) -> None:
    env = clean_env(COGWORKER_REDIS_URL=redis_server.url, COGWORKER_TIMEOUT="60", COGWORKER_CONCURENCY="3")
    done = subprocess.run(
        [sys.executable, "-m", "cogworker", "queues"], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert "COGWORKER_CONCURENCY, COGWORKER_TIMEOUT" in done.stderr
