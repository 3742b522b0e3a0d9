"""The Sentinel client (cogworker/store/sentinel_pool.py) as connect() builds it: TLS to both the
sentinels and the master for rediss+sentinel://, the sentinels' password only on the sentinel
connections, and no master believed without a majority (here: no sentinel answers), with a message
that names neither password."""

from __future__ import annotations

import pytest
from redis.sentinel import MasterNotFoundError, SentinelManagedConnection, SentinelManagedSSLConnection

from cogworker.settings import load_settings
from cogworker.store.connection import connect
from cogworker.store.sentinel_pool import MajoritySentinel
from tests.support.redis_server import free_port

MASTER_PASSWORD = "master-pw-31"
SENTINEL_PASSWORD = "sentinel-pw-32"


def sentinel_of(client: object) -> MajoritySentinel:
    manager = client.connection_pool.sentinel_manager  # type: ignore[attr-defined]
    assert isinstance(manager, MajoritySentinel)
    return manager


@pytest.mark.parametrize(("scheme", "ssl"), [("redis", False), ("rediss", True)])
def test_the_master_and_the_sentinels_get_their_own_options(scheme: str, ssl: bool) -> None:
    url = f"{scheme}+sentinel://app:{MASTER_PASSWORD}@127.0.0.1:1,127.0.0.1:2/m/4"
    client = connect(load_settings(redis_url=url, redis_sentinel_password=SENTINEL_PASSWORD))
    pool = client.connection_pool
    assert pool.connection_class is (SentinelManagedSSLConnection if ssl else SentinelManagedConnection)
    kwargs = pool.connection_kwargs
    assert (kwargs["username"], kwargs["password"], kwargs["db"]) == ("app", MASTER_PASSWORD, 4)
    for sentinel in sentinel_of(client).sentinels:
        options = sentinel.connection_pool.connection_kwargs
        assert options["password"] == SENTINEL_PASSWORD
        assert ("ssl_cert_reqs" in options) is ssl
        assert (sentinel.connection_pool.connection_class.__name__ == "SSLConnection") is ssl


def test_no_master_without_a_majority_and_no_password_in_the_message() -> None:
    url = f"redis+sentinel://:{MASTER_PASSWORD}@127.0.0.1:{free_port()},127.0.0.1:{free_port()}/m"
    client = connect(load_settings(redis_url=url, redis_sentinel_password=SENTINEL_PASSWORD))
    with pytest.raises(MasterNotFoundError) as err:
        client.ping()
    text = str(err.value)
    assert "by a majority of 2 sentinels (named: none)" in text and "Connection refused" in text
    assert MASTER_PASSWORD not in text and SENTINEL_PASSWORD not in text
