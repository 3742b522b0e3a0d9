"""A local stand-in for Sentry's ingest: an HTTP server on a free port that records every envelope
posted to it, for tests that run the real sentry-sdk in a real worker."""

from __future__ import annotations

import gzip
import json
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def parse_envelope(body: bytes) -> list[tuple[dict[str, Any], bytes]]:
    """An envelope's items as (item header, payload): a header line, then per item a header line
    and its payload, `length` bytes long when the header says, else up to the next newline."""
    _header, _, rest = body.partition(b"\n")
    items = []
    while rest.strip():
        line, _, rest = rest.partition(b"\n")
        item = json.loads(line)
        if "length" in item:
            payload, rest = rest[: item["length"]], rest[item["length"] :]
            rest = rest.removeprefix(b"\n")
        else:
            payload, _, rest = rest.partition(b"\n")
        items.append((item, payload))
    return items


class SentryEndpoint:
    """`dsn` points a sentry-sdk at it; `events()` are the error events it was sent."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                encoding = self.headers.get("Content-Encoding")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                endpoint.bodies.append(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, format: str, *args: Any) -> None:  # quiet: pytest shows stderr
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def dsn(self) -> str:
        return f"http://public@127.0.0.1:{self.server.server_address[1]}/1"

    def events(self) -> list[dict[str, Any]]:
        return [
            json.loads(payload)
            for body in list(self.bodies)
            for item, payload in parse_envelope(body)
            if item.get("type") == "event"
        ]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
