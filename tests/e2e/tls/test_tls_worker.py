"""A real `cogworker run`, the ops CLI, the Web UI and a first push over TLS with a client certificate,
as an ACL user limited to `cogworker:*`; and the failures an operator meets first (a wrong CA, no
client certificate, a wrong password, a name the certificate doesn't carry) as one clear line, no hang.
The ACL's command list here is the one docs/deployment/redis.md gives (checked below); the fixtures
fail a test whose flows the server's ACL refused anything."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path
from urllib.parse import quote

import pytest
import redis
from starlette.testclient import TestClient

from cogworker.settings import load_settings
from cogworker.web import create_app
from tests.support.daemon_env import run_cogworker as run_cli
from tests.support.paths import ROOT
from tests.support.redis_server import wait_until
from tests.support.tls_redis import APP_COMMANDS, APP_PASSWORD, TlsRedis
from tests.support.workers import WorkerPool

pytestmark = pytest.mark.slow


def python(env: dict[str, str], code: str) -> subprocess.CompletedProcess[str]:
    return run_cli(env, code=code)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def leaks(text: str) -> bool:
    """The password in `text`, raw or %-encoded as in the URL."""
    return APP_PASSWORD in text or quote(APP_PASSWORD, safe="") in text


def tls_env(tls_redis: TlsRedis, **extra: str) -> dict[str, str]:
    return tls_redis.env(COGWORKER_REQUIRE="tls_jobs", COGWORKER_LOG_FORMAT="json", **extra)


def test_the_docs_list_every_command_the_acl_user_needs() -> None:
    page = (ROOT / "docs" / "deployment" / "redis.md").read_text()
    found = re.search(r"^```\w*\n(ACL SETUSER app .*?)^```", page, re.S | re.M)
    assert found is not None, "docs/deployment/redis.md has no ACL SETUSER block"
    block = found.group(1)
    listed = sorted(word[1:] for word in block.split() if word.startswith("+"))
    assert listed == sorted(APP_COMMANDS.split())


def test_a_fresh_interpreter_configured_by_env_pushes_over_tls(
    tls_redis: TlsRedis, admin: redis.Redis
) -> None:
    done = python(
        tls_env(tls_redis),
        """
        import cogworker, tls_jobs
        print(tls_jobs.note.perform_async("/dev/null", "first"))
        print(len(cogworker.push_bulk(tls_jobs.anote, [("/dev/null", "a"), ("/dev/null", "b")])))
        """,
    )
    assert done.returncode == 0, done.stderr
    jid, count = done.stdout.split()
    queued = [json.loads(raw) for raw in admin.lrange("cogworker:queue:default", 0, -1)]
    assert jid in [job["jid"] for job in queued] and int(count) == 2 and len(queued) == 3
    assert not leaks(done.stdout + done.stderr)


def test_a_worker_runs_jobs_retries_and_serves_the_cli_and_ui_over_tls(
    tls_redis: TlsRedis, admin: redis.Redis, workers: WorkerPool, tmp_path: Path, tls_env: dict[str, str]
) -> None:
    # Two queues: an idle worker waits on the pub/sub wake-up channel (one queue would use BLMOVE).
    env = tls_redis.env(
        COGWORKER_REQUIRE="tls_jobs", COGWORKER_HEARTBEAT_INTERVAL_S="0.3", COGWORKER_QUEUES="default,other"
    )
    worker = workers.start(**env)
    worker.identity()
    out = tmp_path / "ran.txt"
    pushed = python(
        tls_env,
        f"""
        import tls_jobs
        tls_jobs.note.perform_async({str(out)!r}, "sync")
        tls_jobs.anote.perform_async({str(out)!r}, "one")
        tls_jobs.fail_first.perform_async({str(out)!r}, "r")
        """,
    )
    assert pushed.returncode == 0, pushed.stderr
    wait_until(
        lambda: len(lines(out)) >= 2, timeout=15, message=f"two jobs to run:\n{worker.log_text()[-2000:]}"
    )
    assert sorted(line.split()[0] for line in lines(out)) == ["async-one", "sync"]
    # The failed job waits in the retry set; the CLI puts it back now (a set action: a Lua script).
    wait_until(
        lambda: admin.zcard("cogworker:retry") == 1, timeout=15, message="the failure in the retry set"
    )
    retried = run_cli(tls_env, "retry", "retry-all", "--yes")
    assert retried.returncode == 0, retried.stderr
    wait_until(
        lambda: any(line.startswith("retried-r") for line in lines(out)), timeout=15, message="the retry"
    )

    # The wake-up listener subscribed over TLS as the ACL user (the channel is under &cogworker:*).
    wait_until(
        lambda: dict(admin.pubsub_numsub("cogworker:wake")).get("cogworker:wake") == 1,
        timeout=10,
        message="the idle worker's wake-up subscription",
    )
    status = run_cli(tls_env, "status", "--json")
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert [p["identity"] for p in report["processes"]] == [worker.identity()]
    text = run_cli(tls_env, "status")
    doctor = run_cli(tls_env, "doctor", "--json")
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    # INFO and CONFIG GET got through the ACL: the checks read the server, not a refusal.
    assert checks["maxmemory-policy"]["level"] == "OK", checks
    assert checks["persistence"]["message"].startswith("off"), checks
    doctor_text = run_cli(tls_env, "doctor")

    app = create_app(load_settings())
    with TestClient(app) as ui:
        page = ui.get("/")
        assert page.status_code == 200
        # The Redis vitals (INFO) and the counts came through the ACL.
        assert str(admin.info("server")["redis_version"]) in page.text
    title = Path(f"/proc/{worker.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    assert worker.stop() == 0
    shown = [title, status.stdout, status.stderr, text.stdout, text.stderr, doctor.stdout, doctor.stderr]
    shown += [
        doctor_text.stdout,
        doctor_text.stderr,
        page.text,
        worker.log_text(),
        retried.stdout + retried.stderr,
    ]
    assert [s for s in shown if leaks(s)] == []
    assert worker.events_named("job_done") and not worker.events_named("redis_outage_started")


def test_a_wrong_ca_is_one_clear_outage_line_and_the_worker_still_stops(
    tls_redis: TlsRedis, admin: redis.Redis, workers: WorkerPool
) -> None:
    env = tls_redis.env(
        COGWORKER_REQUIRE="tls_jobs", COGWORKER_REDIS_SSL_CA_FILE=str(tls_redis.other_ca_file)
    )
    worker = workers.start(**env)
    outage = wait_until(
        lambda: worker.events_named("redis_outage_started"), timeout=15, message="the outage line"
    )
    assert len(outage) == 1 and "CERTIFICATE_VERIFY_FAILED" in outage[0]["error"]
    worker.signal(signal.SIGTERM)
    assert worker.proc.wait(timeout=10) == 0
    assert not leaks(worker.log_text())
    assert admin.scard("cogworker:processes") == 0


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"COGWORKER_REDIS_SSL_CA_FILE": "other"}, "CERTIFICATE_VERIFY_FAILED"),
        # TLS 1.3 sends the server's refusal after the handshake: depending on timing the client
        # reads the alert or only the closed connection.
        (
            {"COGWORKER_REDIS_SSL_CERT_FILE": "", "COGWORKER_REDIS_SSL_KEY_FILE": ""},
            "certificate required|EOF occurred in violation of protocol|Connection reset by peer",
        ),
        ({"COGWORKER_REDIS_URL": "wrong-password"}, "invalid username-password pair"),
        ({"COGWORKER_REDIS_URL": "127.0.0.2"}, "IP address mismatch"),
    ],
    ids=["wrong-ca", "no-client-cert", "wrong-password", "name-not-in-cert"],
)
def test_the_cli_says_why_it_cant_connect_without_the_password(
    tls_redis: TlsRedis, admin: redis.Redis, change: dict[str, str], expected: str
) -> None:
    env = tls_env(tls_redis, **change)
    if env["COGWORKER_REDIS_SSL_CA_FILE"] == "other":
        env["COGWORKER_REDIS_SSL_CA_FILE"] = str(tls_redis.other_ca_file)
    if env["COGWORKER_REDIS_URL"] == "wrong-password":
        env["COGWORKER_REDIS_URL"] = tls_redis.url(password=APP_PASSWORD + "-wrong")
    if env["COGWORKER_REDIS_URL"] == "127.0.0.2":
        env["COGWORKER_REDIS_URL"] = tls_redis.url(host="127.0.0.2")
    for argv in (["status"], ["status", "--json"], ["doctor"], ["queues", "--json"]):
        done = run_cli(env, *argv, timeout=20)
        assert done.returncode == 1, (argv, done.stdout, done.stderr)
        assert (
            f"can't reach Redis at rediss://app:***@{env['COGWORKER_REDIS_URL'].split('@')[1]}" in done.stderr
        )
        assert any(e in done.stderr for e in expected.split("|")), done.stderr
        assert not leaks(done.stdout + done.stderr)


def test_a_push_and_the_web_ui_say_why_they_cant_connect_without_the_password(
    tls_redis: TlsRedis, admin: redis.Redis, tls_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COGWORKER_REDIS_URL", tls_redis.url(password=APP_PASSWORD + "-wrong"))
    done = python(
        dict(os.environ),
        """
        import tls_jobs
        try:
            tls_jobs.note.perform_async("/dev/null", "x")
        except Exception as exc:
            print(type(exc).__name__, exc, repr(exc))
        """,
    )
    assert done.returncode == 0 and "invalid username-password pair" in done.stdout, done.stderr
    assert not leaks(done.stdout + done.stderr)
    monkeypatch.setenv("COGWORKER_REDIS_URL", tls_redis.url())
    monkeypatch.setenv("COGWORKER_REDIS_SSL_CA_FILE", str(tls_redis.other_ca_file))
    with TestClient(create_app(load_settings())) as ui:
        page = ui.get("/")
    assert page.status_code == 503
    assert "CERTIFICATE_VERIFY_FAILED" in page.text and "rediss://app:***@" in page.text
    assert not leaks(page.text)


def test_without_the_hostname_check_a_name_the_certificate_lacks_is_accepted(
    tls_redis: TlsRedis, admin: redis.Redis
) -> None:
    env = tls_env(
        tls_redis,
        COGWORKER_REDIS_URL=tls_redis.url(host="127.0.0.2"),
        COGWORKER_REDIS_SSL_CHECK_HOSTNAME="false",
    )
    done = run_cli(env, "queues", "--json")
    assert done.returncode == 0, done.stderr
    # The chain is still checked: the wrong CA fails with the hostname check off too.
    env["COGWORKER_REDIS_SSL_CA_FILE"] = str(tls_redis.other_ca_file)
    done = run_cli(env, "queues", "--json")
    assert done.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in done.stderr


def test_results_cancellation_expiry_and_death_hooks_work_as_the_acl_user(
    tls_redis: TlsRedis, admin: redis.Redis, workers: WorkerPool, tmp_path: Path, tls_env: dict[str, str]
) -> None:
    """Every issue-16 feature's Redis traffic (the result channel, the cancel record, the death notices,
    the outcome counters) as the `app` user: the fixture fails the test on any ACL refusal."""
    out = tmp_path / "ran.txt"
    # Expired before any worker is there to take it: pushed, then waited out on the clock.
    stale = python(
        tls_env,
        f"""
        import time, tls_jobs
        tls_jobs.note.set(expires_in=0.05).perform_async({str(out)!r}, "stale")
        deadline = time.time() + 0.1
        while time.time() < deadline:
            time.sleep(0.01)
        """,
    )
    assert stale.returncode == 0, stale.stderr
    worker = workers.start(
        **tls_redis.env(COGWORKER_REQUIRE="tls_jobs", COGWORKER_HEARTBEAT_INTERVAL_S="0.3")
    )
    worker.identity()
    done = python(
        tls_env,
        f"""
        import time, cogworker, tls_jobs
        print(cogworker.result(tls_jobs.doubled.perform_async(21), timeout=20))
        later = tls_jobs.note.perform_in(600, {str(out)!r}, "never")
        print(cogworker.cancel(later).case)
        tls_jobs.doomed.perform_async({str(out)!r}, "d1")
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["42", "scheduled"]
    deaths = Path(f"{out}.deaths")
    wait_until(
        lambda: lines(deaths) == ["d1 failed"], timeout=20, message=f"the hook:\n{worker.log_text()[-2000:]}"
    )
    wait_until(lambda: admin.get("cogworker:stat:expired") == "1", timeout=20, message="the expiry counted")
    assert admin.get("cogworker:stat:cancelled") == "1"
    assert lines(out) == []  # neither the cancelled nor the expired job ran
