"""Redis clients built from settings. Every process builds its own after fork."""

from __future__ import annotations

from functools import cache
from typing import Any

import redis
from redis._parsers.encoders import Encoder
from redis.connection import HiredisRespSerializer, PythonRespSerializer
from redis.utils import HIREDIS_AVAILABLE

if HIREDIS_AVAILABLE:
    import hiredis

from cogworker import cluster_url, redis_sentinel
from cogworker.redis_tls import client_options
from cogworker.settings_fields import SettingsFields
from cogworker.store import sentinel_pool
from cogworker.store.cluster_pool import cluster_client
from cogworker.store.shards import home_prefix

CONNECT_TIMEOUT_S = 2.0
# Bytes that aren't UTF-8 (a payload written by something else) decode to lone surrogates instead
# of raising, possibly after a script already moved the job; encoding them back gives the same
# bytes, so an LREM or ZREM of that text still finds the stored entry (codec.py says how it is shown).
ENCODING = "utf-8"
ENCODING_ERRORS = "surrogateescape"
# redis-py's default buffer size for packing commands (Connection._buffer_cutoff).
_BUFFER_CUTOFF = 6000


class LosslessPacker:
    """hiredis's command packer, with redis-py's own as the fallback for text it refuses.

    hiredis encodes text as strict UTF-8, ignoring `encoding_errors`, so a payload read with its
    invalid bytes escaped could not be sent back (acknowledged, filed, given back). The pure-Python
    packer honours `surrogateescape`; it is slower, so it only packs the commands hiredis refuses.
    """

    def __init__(self) -> None:
        self._fast = HiredisRespSerializer()  # type: ignore[no-untyped-call, unused-ignore]
        encoder = Encoder(ENCODING, ENCODING_ERRORS, False)  # type: ignore[no-untyped-call]
        self._lossless = PythonRespSerializer(_BUFFER_CUTOFF, encoder.encode)

    def pack(self, *args: Any) -> list[bytes]:
        try:
            if isinstance(args[0], str) and " " not in args[0]:
                # hiredis takes the arguments as they are. redis-py's wrapper first copies them into
                # a new tuple, a Python generator step each: 1.2 ms of the 1.6 a fetch from 1,000
                # queues (3,000 arguments) took to pack (the number-of-queues curve, issue 38).
                try:
                    return [hiredis.pack_command(args)]
                except TypeError:
                    pass  # redis-py's wrapper says why, as a DataError
            packed: list[bytes] = self._fast.pack(*args)
        except UnicodeEncodeError:
            packed = self._lossless.pack(*args)  # type: ignore[no-untyped-call]
        return packed


def text_options() -> dict[str, Any]:
    """The decoding options every cogworker client uses (the metrics scrape's too)."""
    options: dict[str, Any] = {
        "decode_responses": True,
        "encoding": ENCODING,
        "encoding_errors": ENCODING_ERRORS,
    }
    if HIREDIS_AVAILABLE:
        options["command_packer"] = LosslessPacker()
    return options


def connect(settings: SettingsFields, *, extra_timeout_s: float = 0.0) -> redis.Redis:
    """The deployment's client (in the sharded layout, the home slot's): see pinned_client."""
    return pinned_client(settings, None, extra_timeout_s=extra_timeout_s)


def pinned_client(
    settings: SettingsFields, prefix: str | None, *, extra_timeout_s: float = 0.0
) -> redis.Redis:
    """A client with a small pool; on a Redis Cluster pinned to the slot of `prefix`'s hash tag (None:
    the deployment's). redis-py's own retries are off: callers decide what a failure means.
    A command may wait `redis_timeout_s` for Redis; a blocking one adds its block time (`extra_timeout_s`).
    A `rediss://` URL gets the COGWORKER_REDIS_SSL_* files; every connection of the pool has them (the
    fetch loop's own DirectConnection is made by this pool, so it has them too).
    A Redis Cluster gets a client pinned to the master owning the deployment's slot (cluster_pool.py);
    with Sentinel the pool asks the sentinels for the master at each connect (sentinel_pool.py)."""
    options: dict[str, Any] = dict(
        socket_timeout=settings.redis_timeout_s + extra_timeout_s,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        retry_on_timeout=False,
        retry=None,
        health_check_interval=0,
        client_name=None,
        **client_options(settings),
        **text_options(),
    )
    if cluster_url.is_cluster(settings):
        # The sharded layout's client for everything but a queue partition's keys: the home slot
        # (store/shards.py). Partitions have clients of their own (store/shard_clients.py).
        pinned = prefix or settings.key_prefix
        if prefix is None and settings.cluster_sharding == "queues":
            pinned = home_prefix(settings.key_prefix)
        return cluster_client(cluster_url.seeds(settings.redis_url), pinned, **options)
    target = redis_sentinel.target(settings)
    if target is not None:
        password = settings.redis_sentinel_password.get_secret_value()
        return sentinel_pool.client(target, password, **options)
    return redis.Redis.from_url(settings.redis_url, **options, **driver_options())


@cache
def driver_options() -> dict[str, Any]:
    """redis-py's name and version for CLIENT SETINFO, read once per process. Left to redis-py (7.x),
    every new connection reads its own version from the installed package's metadata
    (importlib.metadata walks sys.path and parses the METADATA file: 1 to 2 ms, and the email package's
    import on the first): a worker opens several on the way to its first job. The same text either way:
    redis.__version__ is the package's version. redis-py before 7 has no DriverInfo and reads nothing."""
    try:
        from redis.driver_info import DriverInfo
    except ImportError:
        return {}
    return {"driver_info": DriverInfo(lib_version=redis.__version__)}


def is_unavailable(exc: BaseException) -> bool:
    """Redis could not be reached (as opposed to a command it refused)."""
    return isinstance(exc, redis.ConnectionError | redis.TimeoutError | OSError) or (
        isinstance(exc, redis.ResponseError)
        and str(exc).startswith(("LOADING", "MASTERDOWN", "READONLY", "BUSY", "TRYAGAIN"))
    )


def never_sent(exc: BaseException) -> bool:
    """The command failed before Redis could have read it: the connection was never made (refused,
    unreachable, or timed out connecting; redis-py names the connect in its message). Any other
    failure, a timeout or a reset while waiting for the reply above all, may have come after Redis
    ran it: what it wrote is then unknown until read back."""
    return isinstance(exc, redis.ConnectionError | redis.TimeoutError) and (
        "connecting to" in str(exc) or str(exc) == "Timeout connecting to server"
    )
