"""The shipped systemd units, the example env file and install.sh (cogworker/deploy_kit/)."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from cogworker import exitcodes
from cogworker.settings import Settings, load_settings
from tests.support.daemon_env import use_only
from tests.support.paths import ROOT
from tests.support.redis_server import RedisServer
from tests.support.systemd_manager import exec_arg, user_manager
from tests.support.units import SERVICE, TARGET, expose_interpreter

ENV_EXAMPLE = ROOT / "cogworker" / "deploy_kit" / "cogworker.env.example"
INSTALL = ROOT / "cogworker" / "deploy_kit" / "install.sh"
RUNBOOK = ROOT / "deploy" / "RUNBOOK.md"

# The settings every deployment may need (cogworker.env.example documents them all), and the
# ones the swarm added that operators need to know about.
DOCUMENTED_VARIABLES = {
    "COGWORKER_REDIS_URL",
    "COGWORKER_REQUIRE",
    "COGWORKER_QUEUES",
    "COGWORKER_CONCURRENCY",
    "COGWORKER_COUNT",
    "COGWORKER_TIMEOUT_S",
    "COGWORKER_GRACEFUL_STOP_TIMEOUT_S",
    "COGWORKER_MAXMEM_MB",
    "COGWORKER_PRELOAD",
    "COGWORKER_PHASED_RESTART",
    "COGWORKER_ORPHAN_THRESHOLD_S",
    "COGWORKER_MAX_ORPHANINGS",
    "COGWORKER_LOG_FORMAT",
    "COGWORKER_LOG_LEVEL",
    "COGWORKER_METRICS_PORT",
    "COGWORKER_HEARTBEAT_INTERVAL_S",
    "COGWORKER_LIVENESS_TIMEOUT_S",
}


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """{section: {key: [values in order]}}; enough of systemd's syntax for our own files."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", ";")):
            continue
        if stripped.startswith("["):
            current = sections.setdefault(stripped.strip("[]"), {})
            continue
        assert current is not None, f"{path.name}: setting before any section: {line!r}"
        key, _, value = stripped.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def _seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)\s*(s|sec|min)?", value)
    assert match, f"not a plain time span: {value!r}"
    return int(match.group(1)) * (60 if match.group(2) == "min" else 1)


def test_systemd_analyze_verify_accepts_an_instance(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("no systemd-analyze")
    # verify insists that ExecStart's binary exists, and /opt/cogworker/venv isn't installed here: the
    # copy points ExecStart at a stub executable made in tmp_path. Only that line differs.
    stub = tmp_path / "cogworker-swarm"
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    text = SERVICE.read_text()
    copied, count = re.subn(r"(?m)^ExecStart=.*$", f"ExecStart={stub}", text)
    assert count == 1
    (tmp_path / "cogworker@app.service").write_text(copied)
    shutil.copy(TARGET, tmp_path / "cogworker.target")

    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", "cogworker@app.service", "cogworker.target"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # verify exits 0 on unknown keys and unparsable values, and only warns: those lines name our file.
    assert [line for line in output.splitlines() if "cogworker" in line] == []


@pytest.mark.parametrize("path", [SERVICE, TARGET], ids=lambda p: p.name)
def test_every_setting_is_explained_by_a_comment_above_it(path: Path) -> None:
    # systemd has no end-of-line comments (a `#` after a value is part of the value), so "commented"
    # means: the line right above each setting is a comment.
    previous = ""
    uncommented = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        stripped = line.strip()
        is_setting = bool(stripped) and not stripped.startswith(("#", ";", "["))
        if is_setting and not previous.startswith("#"):
            uncommented.append(f"{path.name}:{number}: {line}")
        previous = stripped
    assert uncommented == []


def test_service_has_the_settings_the_swarm_relies_on() -> None:
    unit = parse_unit(SERVICE)
    service = {key: values[-1] for key, values in unit["Service"].items()}
    expected = {
        "Type": "notify",
        "NotifyAccess": "main",
        "EnvironmentFile": "/etc/cogworker/%i.env",
        "ExecStart": "/opt/cogworker/venv/bin/cogworker-swarm",
        "ExecReload": "/bin/kill -HUP $MAINPID",
        "KillMode": "mixed",
        "Restart": "on-failure",
        "RestartPreventExitStatus": str(exitcodes.CONFIG_ERROR),
        "OOMPolicy": "continue",
        "User": "cogworker",
        "Group": "cogworker",
        "SyslogIdentifier": "cogworker-%i",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "ProtectKernelTunables": "yes",
        "ProtectKernelModules": "yes",
        "ProtectKernelLogs": "yes",
        "ProtectControlGroups": "yes",
        "RestrictSUIDSGID": "yes",
        "LockPersonality": "yes",
        "PrivateMounts": "yes",
    }
    assert {key: service.get(key) for key in expected} == expected
    # An allow list first (it sets the default: deny), then what is taken out of it.
    assert unit["Service"]["SystemCallFilter"] == ["@system-service", "~@privileged @resources"]
    assert service["WorkingDirectory"]
    assert _seconds(service["RestartSec"]) > 0
    assert _seconds(service["WatchdogSec"]) == 30
    # systemd must not SIGKILL the swarm before the supervisor's own deadline has run out.
    graceful_s = Settings.model_fields["graceful_stop_timeout_s"].default
    assert _seconds(service["TimeoutStopSec"]) >= graceful_s + 5

    after = " ".join(unit["Unit"]["After"]).split()
    # After the target: stop jobs run in reverse, so the target's stop waits for every instance's.
    assert {"network-online.target", "redis-server.service", "cogworker.target"} <= set(after)
    assert unit["Unit"]["Wants"] == ["network-online.target"]
    assert unit["Unit"]["PartOf"] == ["cogworker.target"]
    assert unit["Install"]["WantedBy"] == ["cogworker.target"]


def test_tasks_max_fits_the_sizing_rule_its_comment_gives() -> None:
    # 2 x COUNT x (CONCURRENCY + 8) + 16: old and new children side by side during a restart, each
    # with its job threads and its own, plus the supervisor and fork server.
    tasks_max = int(parse_unit(SERVICE)["Service"]["TasksMax"][-1])
    assert "2 x COUNT x (CONCURRENCY + 8) + 16" in SERVICE.read_text()
    for count, concurrency in ((16, 100), (64, 20), (os.cpu_count() or 1, 10)):
        assert 2 * count * (concurrency + 8) + 16 <= tasks_max
    assert "2 x COUNT x (CONCURRENCY + 8) + 16" in RUNBOOK.read_text()


def test_systemd_analyze_security_scores_the_unit_as_the_runbook_says(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("no systemd-analyze")
    # The RUNBOOK's command, run on the shipped file from the checkout.
    result = subprocess.run(
        [
            "systemd-analyze",
            "security",
            "--offline=yes",
            "--no-pager",
            "cogworker/deploy_kit/cogworker@.service",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    output = result.stdout + result.stderr
    match = re.search(r"Overall exposure level for (cogworker@\w+\.service): (\d+\.\d+) (\w+)", output)
    assert match, output
    assert float(match.group(2)) <= 1.5, output
    # The settings this unit adds are counted as in force, not as missing.
    for setting in ("SystemCallFilter=~@privileged", "SystemCallFilter=~@resources", "PrivateMounts="):
        assert [line for line in output.splitlines() if setting in line and "\u2717" in line] == []
    assert "Overall exposure level for {}: {} {}".format(*match.groups()) in RUNBOOK.read_text()


def test_target_is_wanted_by_multi_user() -> None:
    assert parse_unit(TARGET)["Install"]["WantedBy"] == ["multi-user.target"]


def _example_assignments() -> dict[str, str]:
    """Every VAR=value in the example, commented out or not."""
    found = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        match = re.fullmatch(r"#?\s*(COGWORKER_[A-Z0-9_]+)=(.*)", line.strip())
        if match:
            found[match.group(1)] = match.group(2)
    return found


def test_env_example_documents_every_variable_and_each_is_a_setting() -> None:
    assignments = _example_assignments()
    assert DOCUMENTED_VARIABLES - set(assignments) == set()
    unknown = {
        name for name in assignments if name.removeprefix("COGWORKER_").lower() not in Settings.model_fields
    }
    assert unknown == set()


def test_env_example_values_are_valid_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    # Uncommenting any line as written must give a swarm that starts, not exit 78.
    use_only(monkeypatch, _example_assignments())
    settings = load_settings()
    assert settings.graceful_stop_timeout_s > settings.timeout_s
    assert settings.liveness_timeout_s == 30


def _run_install(*args: str, script: Path = INSTALL) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(script), "--no-user", "--no-reload", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_install_without_venv_is_idempotent_and_keeps_env_files(tmp_path: Path) -> None:
    prefix = tmp_path / "root"
    unit_dir = tmp_path / "units"
    args = ["--no-venv", "--prefix", str(prefix), "--unit-dir", str(unit_dir), "-i", "app", "-i", "reports"]

    first = _run_install(*args)
    assert first.returncode == 0, first.stderr
    env_file = prefix / "etc/cogworker/app.env"
    assert env_file.read_text() == ENV_EXAMPLE.read_text()
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o640
    assert stat.S_IMODE((prefix / "etc/cogworker").stat().st_mode) == 0o750
    assert (prefix / "etc/cogworker/reports.env").exists()
    for unit in (SERVICE, TARGET):
        assert (unit_dir / unit.name).read_bytes() == unit.read_bytes()
    assert not (prefix / "etc/systemd").exists()
    assert not (prefix / "opt").exists()

    env_file.write_text("COGWORKER_REDIS_URL=redis://127.0.0.1:6390/1\n")
    second = _run_install(*args)
    assert second.returncode == 0, second.stderr
    assert env_file.read_text() == "COGWORKER_REDIS_URL=redis://127.0.0.1:6390/1\n"
    assert "kept" in second.stdout
    for unit in (SERVICE, TARGET):
        assert (unit_dir / unit.name).read_bytes() == unit.read_bytes()


def test_install_saved_alone_takes_the_kit_from_the_cogworker_it_installed(tmp_path: Path) -> None:
    # `cogworker deploy print-install > install.sh`: nothing beside it, so the unit files and the
    # example come from the virtualenv's `cogworker deploy print-*`, the version it runs.
    script = tmp_path / "install.sh"
    script.write_text(INSTALL.read_text())
    prefix = tmp_path / "root"
    args = ["--no-venv", "--prefix", str(prefix), "--unit-dir", str(tmp_path / "units")]

    refused = _run_install(*args, script=script)
    assert refused.returncode == 1
    assert "cogworker.env.example is neither beside this script" in refused.stderr
    assert not (prefix / "etc").exists()

    # Stands in for the virtualenv's console script: this interpreter's cogworker, run the same way.
    venv_bin = prefix / "opt/cogworker/venv/bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "cogworker").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m cogworker "$@"\n')
    (venv_bin / "cogworker").chmod(0o755)
    done = _run_install(*args, script=script)
    assert done.returncode == 0, done.stderr
    assert (prefix / "etc/cogworker/app.env").read_text() == ENV_EXAMPLE.read_text()
    for unit in (SERVICE, TARGET):
        assert (tmp_path / "units" / unit.name).read_bytes() == unit.read_bytes()


def test_install_rejects_bad_command_lines(tmp_path: Path) -> None:
    assert _run_install("--prefix", str(tmp_path)).returncode == 2  # no SOURCE
    assert _run_install("--no-venv", "--prefix", str(tmp_path), "--bogus").returncode == 2
    assert _run_install("--no-venv", "--prefix", str(tmp_path), "-i", "../etc").returncode == 2
    assert not (tmp_path / "etc").exists()
    usage = subprocess.run(["bash", str(INSTALL), "--help"], capture_output=True, text=True, timeout=30)
    assert usage.returncode == 0
    assert usage.stdout.startswith("usage: install.sh")


def _probe_wheel(directory: Path) -> Path:
    """A tiny wheel whose `cogworker-swarm` console script prints a marker.

    Building the real package needs setuptools' build backend from the index (build isolation), and
    nothing in a test may reach beyond loopback; the script's venv and pip steps are the same for any
    wheel, so this one stands in.
    """
    files = {
        "cogworker_probe/__init__.py": "def main() -> None:\n    print('cogworker probe installed')\n",
        "cogworker_probe-0.0.1.dist-info/METADATA": (
            "Metadata-Version: 2.1\nName: cogworker-probe\nVersion: 0.0.1\n"
        ),
        "cogworker_probe-0.0.1.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: cogworker-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
        "cogworker_probe-0.0.1.dist-info/entry_points.txt": (
            "[console_scripts]\ncogworker-swarm = cogworker_probe:main\n"
        ),
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    record.append("cogworker_probe-0.0.1.dist-info/RECORD,,")
    files["cogworker_probe-0.0.1.dist-info/RECORD"] = "\n".join(record) + "\n"
    wheel = directory / "cogworker_probe-0.0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return wheel


def test_install_builds_the_venv_the_unit_runs(tmp_path: Path) -> None:
    # The slow path (python -m venv takes a few seconds); run twice to prove a re-run reuses the venv.
    wheel = _probe_wheel(tmp_path)
    prefix = tmp_path / "root"
    args = ["--prefix", str(prefix), "--python", sys.executable, "--pip-arg=--no-index", str(wheel)]
    for _ in range(2):
        result = _run_install(*args)
        assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("created virtualenv") == 0
    # ExecStart names the path install.sh fills (here under the staging prefix).
    exec_start = parse_unit(SERVICE)["Service"]["ExecStart"][-1]
    swarm = prefix / exec_start.lstrip("/")
    assert subprocess.run([str(swarm)], capture_output=True, text=True, timeout=30).stdout == (
        "cogworker probe installed\n"
    )


# The swarm stand-in for the hardening test: a Python process that does what cogworker-swarm needs
# to do at start (read its env file, talk TCP to Redis, write in its directory, notify systemd).
HARDENED_CODE = """\
import ctypes, os, time
import redis
from supervisor.main import become_subreaper
from supervisor.integrations.notify import Notifier

n = Notifier()
pong = redis.Redis.from_url(os.environ["COGWORKER_REDIS_URL"]).ping()
with open("probe.txt", "w") as f:
    f.write("written")
# The system calls the swarm needs (prctl, fork) and one the unit's SystemCallFilter= takes away.
subreaper = become_subreaper()
pid = os.fork()
if pid == 0:
    os._exit(7)
forked = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
try:
    os.setpriority(os.PRIO_PROCESS, 0, 5)
    renice = "allowed"
except PermissionError:
    renice = "EPERM"
n.ready(status=f"ping {pong} in {os.getcwd()}; subreaper {subreaper}, fork {forked}, setpriority {renice}")
while True:
    n.watchdog()
    time.sleep(n.watchdog_interval_s() or 1.0)
"""


@pytest.mark.systemd
def test_shipped_unit_runs_a_python_redis_client_under_its_hardening(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    url = redis_server.url
    with user_manager(tmp_path) as manager:
        # The shipped files, byte for byte, plus a drop-in that changes only what a test must: the
        # program, where the env file is, and the user (no `cogworker` user here). Every other
        # hardening line stays in force.
        shutil.copy(SERVICE, manager.units_dir / SERVICE.name)
        shutil.copy(TARGET, manager.units_dir / TARGET.name)
        env_file = manager.dir / "app.env"
        example = ENV_EXAMPLE.read_text()
        env_file.write_text(re.sub(r"(?m)^COGWORKER_REDIS_URL=.*$", f"COGWORKER_REDIS_URL={url}", example))
        dropin = manager.units_dir / "cogworker@app.service.d"
        dropin.mkdir()
        (dropin / "test.conf").write_text(
            "[Service]\n"
            "ExecStart=\n"
            f"ExecStart={sys.executable} -c {exec_arg(HARDENED_CODE)}\n"
            "EnvironmentFile=\n"
            f"EnvironmentFile={env_file}\n"
            f"Environment=PYTHONPATH={ROOT}\n"
            "User=root\n"
            "Group=root\n" + expose_interpreter()
        )
        manager.systemctl("daemon-reload", check=True)
        # --no-block and a deadline: a service that never sends READY=1 would hold a blocking start
        # for the unit's whole TimeoutStartSec (90 s).
        manager.systemctl("start", "--no-block", "cogworker@app.service", check=True)
        state = manager.wait_for("cogworker@app.service", "ActiveState", "active", timeout=15)
        status = state["StatusText"]
        assert re.fullmatch(r"ping True in /.*/cogworker/app; .*", status), state
        assert status.endswith("; subreaper True, fork 7, setpriority EPERM"), state
        manager.systemctl("stop", "cogworker.target", check=True)
        manager.wait_for("cogworker@app.service", "ActiveState", "inactive")
