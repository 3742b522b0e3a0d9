"""Redis Sentinel addresses: a `redis+sentinel://` URL, or COGWORKER_REDIS_SENTINELS with
COGWORKER_REDIS_SENTINEL_MASTER, read into one SentinelTarget (store/sentinel_pool.py builds clients
from it).

The URL form is the one redis-sentinel-url, Flask-Redis-Sentinel and Lettuce use (a list of sentinels
where a redis:// URL has one host, then the master's name as the path):

    redis+sentinel://[[user]:password@]host:port[,host:port...]/<master-name>[/<db>]
    rediss+sentinel://...   (TLS to the sentinels and the master, with the COGWORKER_REDIS_SSL_* files)

Its user and password are the master's, as in every Redis URL. The sentinels' own password (their
`requirepass`) is COGWORKER_REDIS_SENTINEL_PASSWORD in both forms, never in the URL.

The settings form (as Sidekiq and redis-rb write it) keeps COGWORKER_REDIS_URL for the master's
credentials and database, with the master's name as its host: `redis://:PASSWORD@mymaster/0`.

Standard library only, like redact.py and redis_tls.py: the settings and the supervisor's metrics
scrape both read it. Messages never quote the URL (it holds the password).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import unquote

SCHEMES = ("redis+sentinel", "rediss+sentinel")
DEFAULT_SENTINEL_PORT = 26379
# The URL the settings default to: with COGWORKER_REDIS_SENTINELS it stands for "no password, db 0".
DEFAULT_URL = "redis://localhost:6379/0"


@dataclass(frozen=True)
class SentinelTarget:
    sentinels: tuple[tuple[str, int], ...]
    master: str
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    db: int = 0
    tls: bool = False


class SentinelSettings(Protocol):
    """What `target` reads: cogworker's Settings and the supervisor's SwarmConfig both have it."""

    @property
    def redis_url(self) -> str: ...
    @property
    def redis_sentinels(self) -> str: ...
    @property
    def redis_sentinel_master(self) -> str: ...


def is_sentinel_url(url: str) -> bool:
    return url.partition("://")[0].lower() in SCHEMES


def parse_hosts(text: str) -> tuple[tuple[str, int], ...]:
    """`host:port,host:port` (a port left out is 26379); ValueError without quoting a password."""
    hosts: list[tuple[str, int]] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if part.startswith("["):  # [::1]:26379
            host, _, rest = part[1:].partition("]")
            port_text = rest.removeprefix(":")
        else:
            host, colon, port_text = part.rpartition(":")
            if not colon:
                host, port_text = part, ""
        if not host or any(c in host for c in "/@?#"):
            raise ValueError("lists a sentinel that is not host:port")
        if port_text and not (port_text.isdigit() and 1 <= int(port_text) <= 65535):
            raise ValueError("lists a sentinel with a bad port (host:port, port 1 to 65535)")
        hosts.append((host, int(port_text) if port_text else DEFAULT_SENTINEL_PORT))
    if not hosts:
        raise ValueError("names no sentinel (host:port[,host:port...])")
    return tuple(hosts)


def _credentials(userinfo: str) -> tuple[str | None, str | None]:
    if not userinfo:
        return None, None
    user, colon, password = userinfo.partition(":")
    if not colon:  # redis-py reads a lone user part as the password
        return None, unquote(user) or None
    return unquote(user) or None, unquote(password) or None


def _db(text: str) -> int:
    if not text:
        return 0
    if not text.isdigit():
        raise ValueError("names a bad database: it is a number (.../mymaster/0)")
    return int(text)


def parse_url(url: str) -> SentinelTarget:
    """A `redis+sentinel://` URL read as its parts; ValueError names what is wrong, not the URL.
    Like redact.safe_url, everything up to the last `@` is credentials, so a password holding `/`
    or `,` can't be read as a host."""
    scheme, _, rest = url.partition("://")
    credentials, _, tail = rest.rpartition("@")
    hosts, slash, path = tail.partition("/")
    path = path.split("?", 1)[0].split("#", 1)[0]
    master, _, db = path.strip("/").partition("/")
    if not slash or not master:
        raise ValueError("names no master: redis+sentinel://host:port[,host:port...]/<master-name>[/<db>]")
    username, password = _credentials(credentials)
    return SentinelTarget(
        parse_hosts(hosts), unquote(master), username, password, _db(db), scheme.lower() == "rediss+sentinel"
    )


def checked_url(url: str) -> str:
    """`url` once it reads as a Sentinel URL (the settings' check; ValueError otherwise)."""
    parse_url(url)
    return url


def _from_settings_form(url: str, sentinels: str, master: str) -> SentinelTarget:
    scheme, _, rest = url.partition("://")
    if scheme not in ("redis", "rediss"):
        raise ValueError("COGWORKER_REDIS_SENTINELS needs a redis:// or rediss:// COGWORKER_REDIS_URL")
    credentials, _, tail = rest.rpartition("@")
    host, _, db = tail.partition("/")
    if url != DEFAULT_URL and host.split(":")[0] != master:
        # Its host would be silently unused: make the URL say which master it is for.
        raise ValueError(
            "with COGWORKER_REDIS_SENTINELS, COGWORKER_REDIS_URL gives only the master's password and "
            "database, and its host is the master's name (COGWORKER_REDIS_SENTINEL_MASTER): "
            f"redis://:PASSWORD@{master}/0"
        )
    username, password = _credentials(credentials)
    database = _db(db.split("?")[0].strip("/"))
    return SentinelTarget(parse_hosts(sentinels), master, username, password, database, scheme == "rediss")


def target(settings: SentinelSettings) -> SentinelTarget | None:
    """Where the sentinels are and which master to ask them for; None without Sentinel."""
    url, sentinels, master = settings.redis_url, settings.redis_sentinels, settings.redis_sentinel_master
    if is_sentinel_url(url):
        if sentinels or master:
            raise ValueError(
                "a redis+sentinel:// COGWORKER_REDIS_URL already names the sentinels and the master: "
                "leave COGWORKER_REDIS_SENTINELS and COGWORKER_REDIS_SENTINEL_MASTER unset"
            )
        return parse_url(url)
    if bool(sentinels) != bool(master):
        raise ValueError("set both COGWORKER_REDIS_SENTINELS and COGWORKER_REDIS_SENTINEL_MASTER, or neither")
    if not sentinels:
        return None
    return _from_settings_form(url, sentinels, master)
