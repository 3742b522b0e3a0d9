"""Cluster URLs and the hash-tag rule (cogworker/cluster_url.py): seed nodes parsed from
redis+cluster:// and rediss+cluster:// (credentials kept as redis-py reads them, never quoted in an
error), only database 0, and which key prefixes put every key of a deployment in one slot."""

from __future__ import annotations

import pytest
from redis.connection import parse_url
from redis.crc import key_slot

from cogworker.cluster_url import check_prefix, hash_tag, is_cluster, seeds, tls_scheme
from cogworker.settings import ConfigError, load_settings
from cogworker.store.cluster_pool import slot_of

PASSWORD = "Cl/uster:pw#1"  # '/', ':' and '#' %-encoded in the URL
URL = "redis+cluster://app:Cl%2Fuster%3Apw%231@10.0.0.1:7000,10.0.0.2:7001,[::1]:7002/0?socket_keepalive=true"


def test_a_cluster_url_names_its_seed_nodes_with_the_credentials_of_each() -> None:
    found = seeds(URL)
    assert found.addresses == (("10.0.0.1", 7000), ("10.0.0.2", 7001), ("::1", 7002))
    assert not found.tls
    options = parse_url(found.urls[2])
    assert (options["host"], options["port"]) == ("::1", 7002)
    assert (options["username"], options["password"]) == ("app", PASSWORD)
    assert options["socket_keepalive"] is True


def test_tls_and_a_default_port() -> None:
    found = seeds("rediss+cluster://node-a,node-b:7001")
    assert found.tls and found.addresses == (("node-a", 6379), ("node-b", 7001))
    assert found.urls[0].startswith("rediss://node-a:6379")
    assert (
        tls_scheme("rediss+cluster://a:1")
        and tls_scheme("rediss://a")
        and not tls_scheme("redis+cluster://a")
    )


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+cluster://a:1,b:2/3", "database other than 0"),
        ("redis+cluster://a:1,:2", "without a host"),
        ("redis+cluster://a:x1", "bad port"),
        ("redis+cluster://a:70000", "bad port"),
        ("unix:///run/redis.sock", "a cluster is reached with"),
        ("a:1", "a cluster is reached with"),
    ],
)
def test_a_bad_cluster_url_says_what_is_wrong_without_the_password(url: str, says: str) -> None:
    with pytest.raises(ValueError, match=says) as caught:
        seeds(url.replace("://", "://app:secret-pw@", 1) if "://" in url else url)
    assert "secret-pw" not in str(caught.value)


@pytest.mark.parametrize(
    ("prefix", "tag"),
    [
        ("{cogworker}:", "cogworker"),
        ("app{x}:", "x"),
        ("{a}{b}:", "a"),
        ("cogworker:", None),
        ("{}:", None),  # an empty tag hashes the whole key
        ("{open:", None),  # closed by the rest of each key: a different slot per key
        ("}{x}:", "x"),
    ],
)
def test_only_a_prefix_that_closes_its_hash_tag_keeps_a_deployment_in_one_slot(
    prefix: str, tag: str | None
) -> None:
    assert hash_tag(prefix) == tag
    if tag is None:
        with pytest.raises(ValueError, match="hash tag"):
            check_prefix(prefix)
        return
    check_prefix(prefix)
    slots = {key_slot(f"{prefix}{suffix}".encode()) for suffix in ("queue:default", "retry", "x{y}z", "}")}
    assert slots == {slot_of(prefix)}


def test_the_settings_turn_cluster_mode_on_by_scheme_or_flag() -> None:
    assert is_cluster(load_settings(redis_url="redis+cluster://a:1,b:2", key_prefix="{cw}:"))
    assert is_cluster(load_settings(redis_url="redis://a:1/0", redis_cluster=True, key_prefix="{cw}:"))
    assert not is_cluster(load_settings(redis_url="redis://a:1/0"))


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"redis_url": "redis+cluster://a:1"}, "COGWORKER_KEY_PREFIX with a hash tag"),
        ({"redis_url": "redis://a:1/2", "redis_cluster": True}, "database other than 0"),
        ({"redis_url": "unix:///s.sock", "redis_cluster": True}, "COGWORKER_REDIS_CLUSTER=true"),
        ({"redis_url": "redis+cluster://:pw@a:1,b:x"}, "bad port"),
    ],
)
def test_a_bad_cluster_setting_is_one_line_naming_it(changes: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError, match=says) as caught:
        load_settings(**{"key_prefix": "{cw}:", **changes} if "KEY_PREFIX" not in says else changes)
    assert "pw@" not in str(caught.value)
