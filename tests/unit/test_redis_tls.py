"""The COGWORKER_REDIS_SSL_* settings: checked at start (a missing, unreadable or mismatched file is one
line naming the setting, exit 78 before anything starts), and turned into the client's TLS options."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cogworker.redis_tls import client_options
from cogworker.settings import ConfigError, load_settings
from tests.support.daemon_env import clean_env
from tests.support.tls_redis import make_ca, make_cert

PASSWORD = "Unit-tls-pw-83hq"
URL = f"rediss://app:{PASSWORD}@127.0.0.1:6390/0"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    directory = tmp_path_factory.mktemp("certs")
    make_ca(directory, "ca")
    make_cert(directory, "server", "ca", server=True)
    make_cert(directory, "client", "ca", server=False)
    (directory / "not-pem.crt").write_text("this is not a certificate\n")
    subprocess.run(
        ["openssl", "pkey", "-in", "client.key", "-aes256", "-passout", "pass:pw", "-out", "encrypted.key"],
        cwd=directory,
        check=True,
        capture_output=True,
    )
    yield directory


def tls(certs: Path, **changes: str) -> dict[str, object]:
    values: dict[str, object] = {
        "redis_url": URL,
        "redis_ssl_ca_file": str(certs / "ca.crt"),
        "redis_ssl_cert_file": str(certs / "client.crt"),
        "redis_ssl_key_file": str(certs / "client.key"),
    }
    values.update(changes)
    return values


def refused(**values: object) -> str:
    with pytest.raises(ConfigError) as err:
        load_settings(**values)
    message = str(err.value)
    assert "\n" not in message
    assert PASSWORD not in message
    return message


def test_the_files_become_the_clients_tls_options(certs: Path) -> None:
    settings = load_settings(**tls(certs), redis_ssl_check_hostname=False)
    assert client_options(settings) == {
        "ssl_ca_certs": str(certs / "ca.crt"),
        "ssl_certfile": str(certs / "client.crt"),
        "ssl_keyfile": str(certs / "client.key"),
        "ssl_check_hostname": False,
        "ssl_cert_reqs": "required",
    }
    assert PASSWORD not in repr(settings) and PASSWORD not in str(settings)


def test_defaults_verify_against_the_system_store_and_check_the_hostname() -> None:
    settings = load_settings(redis_url=URL)
    assert (settings.redis_ssl_ca_file, settings.redis_ssl_cert_file, settings.redis_ssl_key_file) == (
        "",
        "",
        "",
    )
    options = client_options(settings)
    assert options["ssl_ca_certs"] is None and options["ssl_certfile"] is None
    assert options["ssl_check_hostname"] is True and options["ssl_cert_reqs"] == "required"
    assert client_options(load_settings(redis_url="redis://127.0.0.1:6379/0")) == {}


@pytest.mark.parametrize(
    ("field", "variable"),
    [
        ("redis_ssl_ca_file", "COGWORKER_REDIS_SSL_CA_FILE"),
        ("redis_ssl_cert_file", "COGWORKER_REDIS_SSL_CERT_FILE"),
        ("redis_ssl_key_file", "COGWORKER_REDIS_SSL_KEY_FILE"),
    ],
)
def test_a_missing_file_names_its_setting(certs: Path, field: str, variable: str) -> None:
    message = refused(**tls(certs, **{field: str(certs / "gone.pem")}))
    assert f"{variable}='{certs / 'gone.pem'}'" in message
    assert "no such file" in message
    message = refused(**tls(certs, **{field: str(certs)}))
    assert variable in message and "is not a file" in message


def test_a_certificate_needs_its_key_and_a_key_its_certificate(certs: Path) -> None:
    for gone in ("redis_ssl_key_file", "redis_ssl_cert_file"):
        message = refused(**tls(certs, **{gone: ""}))
        assert "COGWORKER_REDIS_SSL_CERT_FILE" in message and "COGWORKER_REDIS_SSL_KEY_FILE" in message


def test_a_key_that_is_not_the_certificates_is_refused(certs: Path) -> None:
    message = refused(**tls(certs, redis_ssl_key_file=str(certs / "server.key")))
    assert "COGWORKER_REDIS_SSL_KEY_FILE" in message and "private key" in message


def test_an_encrypted_key_is_refused_at_once_not_prompted_for(certs: Path) -> None:
    # OpenSSL would ask for its passphrase on the terminal: a service would hang there.
    message = refused(**tls(certs, redis_ssl_key_file=str(certs / "encrypted.key")))
    assert "COGWORKER_REDIS_SSL_KEY_FILE" in message and "unencrypted private key" in message


def test_a_ca_file_without_a_certificate_is_refused(certs: Path) -> None:
    message = refused(**tls(certs, redis_ssl_ca_file=str(certs / "not-pem.crt")))
    assert "COGWORKER_REDIS_SSL_CA_FILE" in message and "no PEM certificate" in message


def test_tls_files_with_a_plain_url_are_refused_not_ignored(certs: Path) -> None:
    # Ignoring them would send the password in clear to a server the operator meant to verify.
    for url in (f"redis://app:{PASSWORD}@127.0.0.1:6390/0", "unix:///run/redis.sock"):
        message = refused(**tls(certs, redis_url=url))
        assert "rediss://" in message and "COGWORKER_REDIS_SSL_CA_FILE" in message
        refused(redis_url=url, redis_ssl_ca_file=str(certs / "ca.crt"))


@pytest.mark.parametrize(
    "argv", [["-m", "cogworker", "run"], ["-m", "supervisor.main"]], ids=["run", "swarm"]
)
def test_a_bad_tls_file_exits_78_before_anything_starts(certs: Path, argv: list[str]) -> None:
    env = clean_env()
    env.update(
        COGWORKER_REDIS_URL=URL,
        COGWORKER_REQUIRE="demo_jobs",
        COGWORKER_REDIS_SSL_CA_FILE=str(certs / "missing-ca.crt"),
    )
    env.pop("NOTIFY_SOCKET", None)
    done = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 78, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "COGWORKER_REDIS_SSL_CA_FILE" in lines[0] and "no such file" in lines[0]
    assert PASSWORD not in done.stderr + done.stdout
