"""supervisor/forkserver/settings_check.py: the fork server's settings, checked in a child process.
Each case runs in a fresh interpreter configured only by environment variables, as the fork server
is, since the check forks the process it runs in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from cogworker import exitcodes
from cogworker.settings import load_settings
from cogworker.settings_fields import values_of
from supervisor.wire.forkserver_messages import CONTROL_FD_VARIABLE, SUPERVISOR_PID_VARIABLE

CHECK = """
import json, sys
from supervisor.forkserver.settings_check import SettingsCheck
from cogworker.settings_fields import PlainSettings, values_of

check = SettingsCheck.start()
{between}
result = check.result()
if isinstance(result, PlainSettings):
    print(json.dumps(values_of(result, reveal=True)))
    print(type(result).__name__, "pydantic" in sys.modules)
else:
    print("exit", result)
"""


def run_check(env: dict[str, str], between: str = "") -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("COGWORKER_")}
    code = textwrap.dedent(CHECK.format(between=between))
    return subprocess.run(
        [sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True, timeout=60
    )


def test_the_checked_values_come_back_whole_and_typed_without_pydantic_in_the_parent() -> None:
    env = {
        "COGWORKER_REDIS_URL": "redis://:s3cret@127.0.0.1:6390/2",
        "COGWORKER_CONCURRENCY": "3",
        "COGWORKER_JOB_TIMEOUT_S": "12.5",
        "COGWORKER_MAXMEM_MB": "300",
        "COGWORKER_PRELOAD": "yes",
        "COGWORKER_LOG_FORMAT": "json",
        "COGWORKER_QUEUES": "a:3,b:1",
        "COGWORKER_WEB_USERNAME": "ops",
        "COGWORKER_WEB_PASSWORD": "pw",
        "COGWORKER_REDIS_SENTINEL_PASSWORD": "sentinel-pw",
    }
    done = run_check(env)
    assert done.returncode == 0, done.stderr
    values, kind = done.stdout.splitlines()
    # The parent only ran the check: pydantic was imported in the child alone.
    assert kind == "PlainSettings False"
    overrides = {k.removeprefix("COGWORKER_").lower(): v for k, v in env.items()}
    assert json.loads(values) == values_of(load_settings(**overrides), reveal=True)


def test_a_bad_setting_prints_its_line_and_its_exit_code_is_passed_on() -> None:
    done = run_check({"COGWORKER_CONCURRENCY": "0", "COGWORKER_WEB_PASSWORD": "hunter2-unused"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"exit {exitcodes.CONFIG_ERROR}"
    assert "COGWORKER_CONCURRENCY='0': must be 1 or more" in done.stderr
    assert "hunter2" not in done.stderr


def test_an_unknown_variable_is_warned_about_and_the_check_still_passes() -> None:
    # The fork server's own two variables are no settings, and not reported as unknown ones.
    fork_server = {CONTROL_FD_VARIABLE: "1000", SUPERVISOR_PID_VARIABLE: str(os.getpid())}
    done = run_check({"COGWORKER_TIMEOUT": "5", **fork_server})
    assert done.returncode == 0, done.stderr
    assert "cogworker: warning: not a setting, ignored: COGWORKER_TIMEOUT\n" in done.stderr
    assert done.stdout.splitlines()[1] == "PlainSettings False"


def test_a_check_killed_before_it_answers_is_a_failure_not_settings() -> None:
    # The check's module is replaced by one that never answers, so the kill lands before any reply.
    between = "import os, signal; os.kill(check.pid, signal.SIGKILL)"
    stall = (
        "import sys, threading, types; fake = types.ModuleType('cogworker.settings');"
        " fake.load_or_exit = threading.Event().wait; sys.modules['cogworker.settings'] = fake\n"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("COGWORKER_")}
    code = stall + textwrap.dedent(CHECK.format(between=between))
    done = subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"exit {exitcodes.FAILURE}"
