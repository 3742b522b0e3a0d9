"""The metrics endpoint under abuse: idle and slow connections, and many scrapes at once.

The server runs in this process (so its threads can be counted) and reads a real Redis; clients are
real sockets. What must hold: idle connections cost no thread and are closed after the request
timeout, a normal scrape answers promptly whatever else is connected, and concurrent scrapes share
one Redis read.
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest
import redis

from cogworker.settings import load_settings
from supervisor.integrations.metrics import SwarmMetrics
from tests.support.redis_server import RedisServer, free_port, wait_until

IDLE_CONNECTIONS = 300


def scrape_text(port: int, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as response:
        assert response.status == 200
        return str(response.read().decode())


def metrics_on(redis_url: str, **options: float) -> SwarmMetrics:
    metrics = SwarmMetrics(load_settings(redis_url=redis_url, metrics_port=free_port()), **options)
    assert metrics.start() is not None
    return metrics


@pytest.fixture
def served(redis_server: RedisServer, r: redis.Redis) -> Iterator[SwarmMetrics]:
    metrics = metrics_on(redis_server.url)
    try:
        yield metrics
    finally:
        metrics.stop()


def server_side_connections(port: int) -> int:
    """Connections this process accepted on `port` and still holds open."""
    return sum(
        1
        for c in psutil.Process().net_connections(kind="tcp")
        if c.laddr and c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED and c.raddr
    )


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def test_idle_connections_hold_no_thread_and_a_scrape_still_answers(served: SwarmMetrics) -> None:
    port = served.port
    assert port is not None
    scrape_text(port)  # whatever a first scrape starts (a Redis connection) is started before counting
    threads_before = threading.active_count()
    idle = [connect(port) for _ in range(IDLE_CONNECTIONS)]
    try:
        # Wait until the server has taken every connection off the listen backlog: then any thread
        # per connection would exist.
        wait_until(
            lambda: served.connections_accepted >= IDLE_CONNECTIONS + 1,
            message="every idle connection accepted",
        )
        assert threading.active_count() - threads_before <= 2
        started = time.monotonic()
        assert "cogworker_busy_threads" in scrape_text(port)
        assert time.monotonic() - started < 1.0
        # Connections past the cap were closed (the longest-waiting first): the fds are bounded too.
        assert server_side_connections(port) <= served.max_connections
    finally:
        for sock in idle:
            sock.close()


def read_until_closed(sock: socket.socket) -> bytes:
    """What the server sent before it closed the connection (the socket has a timeout)."""
    received = b""
    while chunk := sock.recv(4096):
        received += chunk
    return received


def test_idle_and_slowloris_connections_are_closed_after_the_request_timeout(
    redis_server: RedisServer, r: redis.Redis
) -> None:
    metrics = metrics_on(redis_server.url, request_timeout_s=0.5)
    port = metrics.port
    assert port is not None
    try:
        idle, slow = connect(port), connect(port)
        started = time.monotonic()
        slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never the blank line that ends it
        for sock in (idle, slow):
            assert b"200 OK" not in read_until_closed(sock)
        took = time.monotonic() - started
        assert 0.4 < took < 3.0
        # A slowloris that keeps sending still has one deadline for its whole request.
        trickle = connect(port)
        started = time.monotonic()
        with pytest.raises(OSError):
            while time.monotonic() - started < 4.0:
                trickle.sendall(b"X-Slow: 1\r\n")
                time.sleep(0.05)  # the trickle itself, not synchronisation
        assert time.monotonic() - started < 3.0
        assert "cogworker_redis_up 1.0" in scrape_text(port)
        for sock in (idle, slow, trickle):
            sock.close()
    finally:
        metrics.stop()


def test_a_request_too_large_or_malformed_gets_an_error_and_is_closed(served: SwarmMetrics) -> None:
    port = served.port
    assert port is not None
    with connect(port) as sock:
        sock.sendall(b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\n\r\n")
        assert read_until_closed(sock).startswith(b"HTTP/1.1 431 ")
    with connect(port) as sock:
        sock.sendall(b"nonsense\r\n\r\n")
        assert read_until_closed(sock).startswith(b"HTTP/1.1 400 ")
    with connect(port) as sock:
        sock.sendall(b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        assert read_until_closed(sock).startswith(b"HTTP/1.1 405 ")
    with connect(port) as sock:
        sock.sendall(b"GET /metrics?name[]=cogworker_threads HTTP/1.0\r\nAccept: text/plain\r\n\r\n")
        reply = read_until_closed(sock)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK")
    assert f"content-length: {len(body)}".encode() in head.lower()
    assert b"cogworker_threads 0.0" in body and b"cogworker_busy_threads" not in body


def command_calls(client: redis.Redis, command: str) -> int:
    stats = client.info("commandstats")
    entry = stats.get(f"cmdstat_{command}")
    return int(entry["calls"]) if entry else 0


def test_concurrent_scrapes_share_one_redis_read(private_redis: RedisServer) -> None:
    client = private_redis.client()
    client.sadd("cogworker:queues", "default")
    metrics = metrics_on(private_redis.url)
    port = metrics.port
    assert port is not None
    try:
        before = command_calls(client, "zcard")
        # The 3 ZCARDs (retry, scheduled, dead) of one read; 20 scrapes reading Redis each make 60.
        with ThreadPoolExecutor(max_workers=20) as pool:
            texts = list(pool.map(lambda _: scrape_text(port), range(20)))
        assert all("cogworker_redis_up 1.0" in text for text in texts)
        reads = (command_calls(client, "zcard") - before) / 3
        # One read, or two if the cache expired while the scrapes were still arriving.
        assert 1 <= reads <= 2
        # The scrape reads Redis over one connection, however many scrapes there are.
        others = [c for c in client.client_list() if int(c["id"]) != client.client_id()]
        assert len(others) == 1
    finally:
        metrics.stop()
        client.close()


def test_a_stalled_redis_is_read_once_for_many_scrapes(private_redis: RedisServer) -> None:
    metrics = metrics_on(private_redis.url)
    port = metrics.port
    assert port is not None
    try:
        assert "cogworker_redis_up 1.0" in scrape_text(port)
        private_redis.pause()
        wait_until(lambda: "cogworker_redis_up 0.0" in scrape_text(port), message="redis_up 0")
        # The outage is cached like a reading: 10 scrapes don't each wait out the Redis timeout.
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=10) as pool:
            texts = list(pool.map(lambda _: scrape_text(port), range(10)))
        assert time.monotonic() - started < 2.0
        assert all("cogworker_redis_up 0.0" in text for text in texts)
    finally:
        private_redis.resume()
        metrics.stop()
