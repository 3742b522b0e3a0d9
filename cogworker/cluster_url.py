"""Redis Cluster addresses: `redis+cluster://` / `rediss+cluster://` URLs and COGWORKER_REDIS_CLUSTER,
and the hash-tag rule that keeps a deployment's keys in one slot.

A cluster URL names seed nodes, `redis+cluster://[user:password@]host:port[,host:port...][/0]`; any one
of them answering is enough to find the rest (store/cluster_pool.py). It is turned into one ordinary
`redis://` (or `rediss://`) URL per seed, so redis-py parses the credentials and query options exactly as
it does for a single server.

Standard library only, like redact.py and redis_tls.py: the settings and the supervisor's metrics scrape
both build on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
# Redis Cluster has one database: SELECT of another is refused.
_ONLY_DB = ("", "0")


class ClusterSettings(Protocol):
    """What these functions read: cogworker's Settings and the supervisor's SwarmConfig both have it."""

    @property
    def redis_url(self) -> str: ...
    @property
    def redis_cluster(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Seeds:
    """The seed nodes, each as an ordinary single-server URL (with the cluster URL's credentials)."""

    urls: tuple[str, ...]
    addresses: tuple[tuple[str, int], ...]
    tls: bool


def is_cluster(settings: ClusterSettings) -> bool:
    return settings.redis_cluster or urlsplit(settings.redis_url).scheme in CLUSTER_SCHEMES


def tls_scheme(url: str) -> bool:
    """Whether `url` is TLS to Redis: `rediss://` or `rediss+cluster://`."""
    return urlsplit(url).scheme in ("rediss", "rediss+cluster")


def seeds(url: str) -> Seeds:
    """The seed nodes of a cluster URL (or of a plain `redis://` / `rediss://` URL with
    COGWORKER_REDIS_CLUSTER=true: its one host). ValueError says what is wrong, never quoting the
    credentials (they may hold the password)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in (*CLUSTER_SCHEMES, "redis", "rediss"):
        raise ValueError(
            "a cluster is reached with redis+cluster://, rediss+cluster://, redis:// or rediss://"
        )
    tls = scheme.startswith("rediss")
    # As in redact.safe_url: everything up to the last '@' is credentials (a password may hold '/').
    credentials, at, tail = rest.rpartition("@")
    hosts_end = len(tail)
    for mark in "/?#":
        found = tail.find(mark)
        if found != -1:
            hosts_end = min(hosts_end, found)
    hosts, remainder = tail[:hosts_end], tail[hosts_end:]
    path = urlsplit("redis://h" + remainder).path.replace("/", "")
    if path not in _ONLY_DB:
        raise ValueError("names a database other than 0: Redis Cluster has only database 0")
    addresses = tuple(_address(part) for part in hosts.split(","))
    base = "rediss" if tls else "redis"
    creds = credentials + at
    urls = tuple(f"{base}://{creds}{_netloc(host, port)}{remainder}" for host, port in addresses)
    return Seeds(urls, addresses, tls)


def _address(part: str) -> tuple[str, int]:
    host, colon, port = part.strip().rpartition(":")
    if not colon:
        host, port = part.strip(), "6379"
    host = host.removeprefix("[").removesuffix("]")  # an IPv6 literal
    if not host:
        raise ValueError("names a seed node without a host (redis+cluster://host:port,host:port)")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("names a seed node with a bad port (redis+cluster://host:port,host:port)")
    return host, int(port)


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def hash_tag(prefix: str) -> str | None:
    """The hash tag every key starting with `prefix` is hashed by, or None when the slot would depend
    on the rest of the key.

    Redis hashes only the text between the first '{' and the first '}' after it, when that is not
    empty. The first '{' of a key starting with `prefix` is the prefix's own; if its '}' is in the
    prefix too, every key of the deployment hashes the same text, so lands in the same slot."""
    start = prefix.find("{")
    if start == -1:
        return None
    end = prefix.find("}", start + 1)
    if end == -1 or end == start + 1:
        return None
    return prefix[start + 1 : end]


def check_prefix(prefix: str) -> None:
    """Cluster mode's rule for COGWORKER_KEY_PREFIX; ValueError names both settings."""
    if hash_tag(prefix) is None:
        raise ValueError(
            f"a Redis Cluster needs COGWORKER_KEY_PREFIX with a hash tag, e.g. '{{cogworker}}:' (it is "
            f"{prefix!r}): every cogworker script and queue move touches several keys, and Redis Cluster "
            "runs those only when all of them are in one slot"
        )


def check_sharded_prefix(prefix: str) -> None:
    """COGWORKER_CLUSTER_SHARDING=queues's rule for COGWORKER_KEY_PREFIX: no hash tag, since the layout
    tags each queue partition (and the home slot) itself, and a tag in the prefix would put them all in
    one slot again."""
    if "{" in prefix or "}" in prefix:
        raise ValueError(
            f"COGWORKER_CLUSTER_SHARDING=queues needs COGWORKER_KEY_PREFIX without a hash tag (it is "
            f"{prefix!r}): the layout gives each queue partition a hash tag of its own, e.g. "
            "cogworker:{default#0}:queue"
        )
