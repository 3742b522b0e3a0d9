"""A private redis-server that only speaks TLS, demands a client certificate, and has an ACL user
limited to cogworker's keys and channels: what a managed Redis looks like (docs/deployment/redis.md,
"TLS and ACL users").

The certificates are made here with the `openssl` CLI: a CA, a server certificate for 127.0.0.1 and
localhost, a client certificate, and a second CA that signed none of them (for the wrong-CA tests).
The `default` user keeps every right behind an admin password, so a test can flush and inspect;
cogworker itself connects as `app`, whose command list is APP_COMMANDS, the list
docs/deployment/redis.md gives.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import quote

import redis

from tests.support.redis_server import free_port, wait_until

# Distinctive, so a grep of logs, titles and output can't miss it or match anything else; it holds
# characters that must be %-encoded in a URL.
APP_PASSWORD = "Tls-Acl-s3cret/pw#7Q"
ADMIN_PASSWORD = "admin-9d1f0c"
APP_USER = "app"

# Every command cogworker sends (its Lua scripts' calls included: Redis checks a script's calls against
# the user too), from the code and from INFO commandstats after the worker, CLI, Web UI and metrics
# suites; the TLS tests fail on any refusal the server's ACL LOG records. The docs' list is this
# one (tests/e2e/tls/test_tls_worker.py checks they agree).
APP_COMMANDS = (
    "evalsha eval script|load script|exists"
    " lpush rpush lpop rpop lmove blmove brpop lrange lrem llen lindex ltrim lpos"
    " sadd srem smembers sismember spop scard"
    " zadd zrem zrange zrevrange zrangebyscore zscore zcard zremrangebyrank zremrangebyscore zscan"
    " hset hget hgetall hdel hsetnx hmget hincrby hlen hexists hscan"
    " get set mget del exists expire pexpire ttl pttl type incr incrby decr rename scan"
    " publish subscribe unsubscribe multi exec"
    " ping select time info config|get wait"
)


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(directory: Path, name: str) -> None:
    openssl("genrsa", "-out", f"{name}.key", "2048", cwd=directory)
    openssl(
        *("req", "-x509", "-new", "-nodes", "-key", f"{name}.key", "-sha256", "-days", "2"),
        *("-subj", f"/CN=cogworker test {name}", "-out", f"{name}.crt"),
        cwd=directory,
    )


def make_cert(directory: Path, name: str, ca: str, *, server: bool) -> None:
    """`name`.crt/.key signed by `ca`; a server certificate names 127.0.0.1 and localhost."""
    openssl("genrsa", "-out", f"{name}.key", "2048", cwd=directory)
    openssl(
        *("req", "-new", "-key", f"{name}.key", "-subj", f"/CN={name}", "-out", f"{name}.csr"),
        cwd=directory,
    )
    ext = directory / f"{name}.ext"
    usage = "serverAuth" if server else "clientAuth"
    san = "subjectAltName=IP:127.0.0.1,DNS:localhost\n" if server else ""
    ext.write_text(f"{san}extendedKeyUsage={usage}\nkeyUsage=digitalSignature,keyEncipherment\n")
    openssl(
        *("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key"),
        *("-CAcreateserial", "-days", "2", "-sha256", "-extfile", ext.name, "-out", f"{name}.crt"),
        cwd=directory,
    )


class TlsRedis:
    """redis-server with `--port 0 --tls-port P`, `tls-auth-clients yes` and the `app` ACL user."""

    def __init__(self, commands: str = APP_COMMANDS) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server not found: run `make install` (it installs one)")
        self.dir = Path(tempfile.mkdtemp(prefix="cogworker-tls-"))
        make_ca(self.dir, "ca")
        make_ca(self.dir, "other-ca")
        make_cert(self.dir, "server", "ca", server=True)
        make_cert(self.dir, "client", "ca", server=False)
        for key in self.dir.glob("*.key"):
            key.chmod(0o600)
        self.port = free_port()
        self.commands = commands
        # One argument per rule: redis-server joins its arguments into a config line, quoting each.
        acl = [APP_USER, "on", f">{APP_PASSWORD}", "resetchannels", "~cogworker:*", "&cogworker:*", "-@all"]
        acl += [f"+{command}" for command in commands.split()]
        self.proc = subprocess.Popen(
            [
                binary,
                # 127.0.0.2 is not in the server certificate: a name the hostname check refuses.
                *("--port", "0", "--tls-port", str(self.port), "--bind", "127.0.0.1", "127.0.0.2"),
                *("--tls-cert-file", str(self.dir / "server.crt")),
                *("--tls-key-file", str(self.dir / "server.key")),
                *("--tls-ca-cert-file", str(self.dir / "ca.crt")),
                *("--tls-auth-clients", "yes"),
                *("--requirepass", ADMIN_PASSWORD, "--user", *acl),
                *("--save", "", "--appendonly", "no", "--dir", str(self.dir), "--daemonize", "no"),
            ],
            stdout=open(self.dir / "redis.log", "ab"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        admin = self.admin()
        try:
            wait_until(lambda: self._ping(admin), timeout=15, message=f"TLS redis-server on {self.port}")
        except TimeoutError as exc:
            log = self.log_text()[-2000:]
            self.close()
            raise RuntimeError(f"TLS redis-server didn't start:\n{log}") from exc
        finally:
            admin.close()

    @property
    def ca_file(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def other_ca_file(self) -> Path:
        return self.dir / "other-ca.crt"

    def url(self, user: str = APP_USER, password: str = APP_PASSWORD, host: str = "127.0.0.1") -> str:
        return f"rediss://{user}:{quote(password, safe='')}@{host}:{self.port}/0"

    def env(self, **extra: str) -> dict[str, str]:
        """The settings a cogworker process needs to reach this server as the `app` user."""
        return {
            "COGWORKER_REDIS_URL": self.url(),
            "COGWORKER_REDIS_SSL_CA_FILE": str(self.ca_file),
            "COGWORKER_REDIS_SSL_CERT_FILE": str(self.dir / "client.crt"),
            "COGWORKER_REDIS_SSL_KEY_FILE": str(self.dir / "client.key"),
            **extra,
        }

    def admin(self) -> redis.Redis:
        """A client as the all-powerful `default` user (for flushing and inspecting, never cogworker)."""
        return redis.Redis(
            host="127.0.0.1",
            port=self.port,
            password=ADMIN_PASSWORD,
            ssl=True,
            ssl_ca_certs=str(self.ca_file),
            ssl_certfile=str(self.dir / "client.crt"),
            ssl_keyfile=str(self.dir / "client.key"),
            decode_responses=True,
            socket_timeout=5,
        )

    def refused(self) -> list[str]:
        """The commands, keys and channels the ACL refused the `app` user so far (ACL LOG), as
        `reason:object` lines; a failed login (a test's wrong password) is not a refusal."""
        admin = self.admin()
        try:
            entries = admin.acl_log()
        finally:
            admin.close()
        return [
            f"{e['reason']}:{e['object']} ({e['context']})"
            for e in entries
            if e["username"] == APP_USER and e["reason"] != "auth"
        ]

    def log_text(self) -> str:
        return (self.dir / "redis.log").read_text(errors="replace")

    @staticmethod
    def _ping(client: redis.Redis) -> bool:
        try:
            return bool(client.ping())
        except (redis.ConnectionError, OSError):
            return False

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
