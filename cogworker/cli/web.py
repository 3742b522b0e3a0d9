"""`cogworker web`: the Web UI (cogworker/web/) served on its own by uvicorn.

It binds COGWORKER_WEB_HOST:COGWORKER_WEB_PORT (127.0.0.1:7433 by default) and refuses, with one line
and exit 78 like every bad setting, to listen anywhere but loopback without HTTP Basic credentials:
the UI retries, deletes and stops things, and must not be open to a network by accident.
"""

from __future__ import annotations

import argparse
import ipaddress
import signal
from typing import Any

from cogworker import exitcodes
from cogworker.cli.common import Context, Failure
from cogworker.settings import Settings


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "web",
        help="serve the Web UI (127.0.0.1:7433 by default)",
        description="Serve the Web UI standalone on COGWORKER_WEB_HOST:COGWORKER_WEB_PORT. Off loopback "
        "it needs COGWORKER_WEB_USERNAME and COGWORKER_WEB_PASSWORD (HTTP Basic). "
        "COGWORKER_WEB_READ_ONLY=true hides and refuses every action. Exit 78 on a bad setting.",
    )
    parser.add_argument("--host", help="listen on this address (default: COGWORKER_WEB_HOST)")
    parser.add_argument("--port", type=int, help="listen on this port (default: COGWORKER_WEB_PORT)")
    parser.set_defaults(handler=serve)


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve to anything


def listen_error(settings: Settings, host: str, port: int) -> str | None:
    """Why the UI must not listen there, or None."""
    if not 1 <= port <= 65535:
        return f"--port {port} is not a TCP port (1 to 65535)"
    if not is_loopback(host) and not settings.web_username:
        return (
            f"refusing to serve the Web UI on {host}, which is not a loopback address, without "
            "credentials: set COGWORKER_WEB_USERNAME and COGWORKER_WEB_PASSWORD (HTTP Basic), "
            "or listen on 127.0.0.1"
        )
    return None


def serve(ctx: Context) -> int:
    settings = ctx.settings
    host = ctx.args.host or settings.web_host
    port = ctx.args.port if ctx.args.port is not None else settings.web_port
    problem = listen_error(settings, host, port)
    if problem is not None:
        raise Failure(f"configuration error: {problem}", exitcodes.CONFIG_ERROR)
    try:
        import uvicorn

        from cogworker.web import create_app
    except ImportError as exc:
        raise Failure(
            f"the Web UI needs the web extra: pip install 'cogworker-redis[web]' ({exc})",
            exitcodes.CONFIG_ERROR,
        ) from None
    # uvicorn's own access log is off: every action is logged by the app (web_action, web_post_refused).
    # log_config=None: uvicorn's lines (an error in a request) go to the root logger's handler, the
    # same JSON or console lines as the app's (cogworker/log_stdlib.py), not uvicorn's own format.
    config = uvicorn.Config(
        create_app(settings), host=host, port=port, access_log=False, log_level="warning", log_config=None
    )
    ctx.err.write(f"cogworker web: serving http://{_url_host(host)}:{port}/\n")
    ctx.err.flush()
    # uvicorn stops gracefully on TERM or INT, puts back the handlers it found, then raises the signal
    # again. These handlers only record it, so that a stop ends `cogworker web` with exit 0 (and its
    # atexit work done) rather than by the signal's default action.
    stopped: list[int] = []
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda received, _frame: stopped.append(received))
    uvicorn.Server(config).run()
    return exitcodes.OK


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
