"""`cogworker settings [--json]`: every setting's value, default and source, secrets masked, no Redis."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cogworker.cli.main import main
from cogworker.settings_fields import FIELD_NAMES, SettingsFields
from tests.support.daemon_env import clean_env, use_only
from tests.support.redis_server import free_port

BIN = Path(sys.executable).parent


@pytest.fixture
def nowhere() -> str:
    """A Redis URL with a password, on a port nothing listens on: the verb must not need Redis."""
    return f"redis://:hunter2@127.0.0.1:{free_port()}/0"


def test_sources_defaults_and_masking(
    nowhere: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_only(
        monkeypatch,
        {
            "COGWORKER_REDIS_URL": nowhere,
            "COGWORKER_CONCURRENCY": "4",
            "COGWORKER_QUEUES": "from_the_shell",
            # Set here so the test restores them: the env file's values replace these.
            "COGWORKER_WEB_USERNAME": "",
            "COGWORKER_WEB_PASSWORD": "",
        },
    )
    env_file = tmp_path / "app.env"
    env_file.write_text(
        "COGWORKER_QUEUES=a:2,b:1\nCOGWORKER_WEB_USERNAME=admin\nCOGWORKER_WEB_PASSWORD=s3cret\n"
    )

    assert main(["--env-file", str(env_file), "settings", "--json"]) == 0
    out = capsys.readouterr().out
    assert "hunter2" not in out and "s3cret" not in out
    report = json.loads(out)
    assert report["env_file"] == str(env_file)
    shown = report["settings"]
    assert list(shown) == list(FIELD_NAMES)
    assert shown["redis_url"] == {
        "variable": "COGWORKER_REDIS_URL",
        "value": nowhere.replace("hunter2", "***"),
        "default": "redis://localhost:6379/0",
        "source": "environment",
    }
    assert shown["concurrency"] == {
        "variable": "COGWORKER_CONCURRENCY",
        "value": 4,
        "default": 10,
        "source": "environment",
    }
    assert (shown["queues"]["value"], shown["queues"]["source"]) == ("a:2,b:1", "env file")
    assert shown["web_password"] == {
        "variable": "COGWORKER_WEB_PASSWORD",
        "value": "**********",
        "default": "",
        "source": "env file",
    }
    assert shown["timeout_s"] == {
        "variable": "COGWORKER_TIMEOUT_S",
        "value": SettingsFields.timeout_s,
        "default": SettingsFields.timeout_s,
        "source": "default",
    }
    assert shown["maxmem_mb"]["value"] is None and shown["maxmem_mb"]["source"] == "default"

    assert main(["--env-file", str(env_file), "settings"]) == 0
    text = capsys.readouterr().out
    assert "hunter2" not in text and "s3cret" not in text
    rows = {line.split()[0]: line.split() for line in text.splitlines()}
    assert rows["VARIABLE"] == ["VARIABLE", "VALUE", "SOURCE", "DEFAULT"]
    assert rows["COGWORKER_QUEUES"] == [
        "COGWORKER_QUEUES",
        "a:2,b:1",
        "env",
        "file",
        str(env_file),
        "default",
    ]
    assert rows["COGWORKER_CONCURRENCY"] == ["COGWORKER_CONCURRENCY", "4", "environment", "10"]
    assert rows["COGWORKER_WEB_PASSWORD"] == [
        "COGWORKER_WEB_PASSWORD",
        "**********",
        "env",
        "file",
        str(env_file),
        '""',
    ]
    assert rows["COGWORKER_MAXMEM_MB"] == ["COGWORKER_MAXMEM_MB", "(unset)", "default", "(unset)"]
    assert rows["COGWORKER_PRELOAD"] == ["COGWORKER_PRELOAD", "false", "default", "false"]
    assert len(rows) == len(FIELD_NAMES) + 1


def test_a_variable_is_matched_whatever_its_case_as_the_settings_read_it(
    nowhere: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_only(monkeypatch, {"COGWORKER_REDIS_URL": nowhere})
    monkeypatch.setenv("cogworker_count", "3")
    assert main(["settings", "--json"]) == 0
    count = json.loads(capsys.readouterr().out)["settings"]["count"]
    assert (count["value"], count["source"]) == (3, "environment")


def run_settings(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The installed command in a fresh interpreter configured only by `env`."""
    return subprocess.run(
        [str(BIN / "cogworker"), *argv], env=clean_env(env), capture_output=True, text=True, timeout=30
    )


def test_as_a_command_without_redis(nowhere: str) -> None:
    done = run_settings("settings", "--json", COGWORKER_REDIS_URL=nowhere, COGWORKER_RESULT_TTL_S="60")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)["settings"]
    assert shown["redis_url"]["value"] == nowhere.replace("hunter2", "***")
    assert (shown["result_ttl_s"]["value"], shown["result_ttl_s"]["source"]) == (60.0, "environment")
    assert "hunter2" not in done.stdout + done.stderr

    bad = run_settings("settings", COGWORKER_REDIS_URL=nowhere, COGWORKER_CONCURRENCY="0")
    assert (bad.returncode, bad.stdout) == (78, "")
    assert (
        bad.stderr.strip() == "cogworker: configuration error: COGWORKER_CONCURRENCY='0': must be 1 or more"
    )
