"""The Web UI's page times: every page of `cogworker.web` on a big deployment and on a small one.

The app is built in-process (`create_app(settings)`) and each page requested through httpx2's ASGI
transport, so a figure is the app's own time (middleware, handler, Redis round trips, rendering)
without a socket or a server loop in front. Each page: warm-ups, then repeats (until a time cap);
median and p99 of the request times, and the Redis commands it sent, from INFO commandstats.

The same pages on a small fill (1,000 per set, a 1,000-job queue; the same 200 queues and 50
processes) must cost the same number of commands: a page whose count differs reads in proportion
to a set's or a queue's size, which is what the scale rule forbids -- unless the count stops growing
at a cap (a filter's search budget), which a middle fill (10,000, counted only, not timed) tells.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx2
import redis
from redis_server import SCRIPT_COMMANDS
from starlette.applications import Starlette
from starlette.routing import Match
from web_fill import BIG_QUEUE, ERROR_FILTER, MISSING_JID, NO_MATCH_FILTER, Fill, Seeded, seed

from cogworker.settings import load_settings
from cogworker.web import create_app

TARGET_P99_MS = 100.0
BIG = Fill("100k", set_size=100_000, big_queue=100_000)
MIDDLE = Fill("10k", set_size=10_000, big_queue=10_000)
SMALL = Fill("1k", set_size=1_000, big_queue=1_000)
WEB_SETTING_DEFAULTS: dict[str, Any] = {
    # A COGWORKER_WEB_* left in the caller's shell (credentials, read-only) must not change the pages.
    "web_username": "",
    "web_password": "",
    "web_read_only": False,
    "web_session_secret": "",
    "web_trust_forwarded": False,
}


@dataclass(frozen=True)
class Repeats:
    warmups: int = 10
    repeats: int = 200
    cap_s: float = 30.0  # per page and fill: a slow page stops early (at least min_repeats)
    min_repeats: int = 20

    @classmethod
    def make(cls, quick: bool) -> Repeats:
        return cls(warmups=3, repeats=30, cap_s=10.0, min_repeats=5) if quick else cls()

    @classmethod
    def counting(cls) -> Repeats:
        """Enough requests to count a page's commands (the count is the same every time)."""
        return cls(warmups=2, repeats=5, cap_s=10.0, min_repeats=5)


@dataclass(frozen=True)
class PageSpec:
    label: str  # the route, with <placeholders> for what changes between fills
    url: Callable[[Seeded], str]
    ok: frozenset[int] = frozenset({200})


PAGES = [
    PageSpec("/", lambda s: "/"),
    PageSpec("/?days=180", lambda s: "/?days=180"),
    PageSpec("/busy", lambda s: "/busy"),
    PageSpec("/queues", lambda s: "/queues"),
    PageSpec("/queues/<big>", lambda s: f"/queues/{BIG_QUEUE}"),
    PageSpec("/queues/<big>?page=2000", lambda s: f"/queues/{BIG_QUEUE}?page=2000"),
    PageSpec("/retries", lambda s: "/retries"),
    PageSpec("/retries?page=2000", lambda s: "/retries?page=2000"),
    PageSpec("/dead", lambda s: "/dead"),
    PageSpec("/dead?page=2000", lambda s: "/dead?page=2000"),
    PageSpec(f"/dead?error={ERROR_FILTER}", lambda s: f"/dead?error={ERROR_FILTER}"),
    PageSpec("/dead?error=<matches none>", lambda s: f"/dead?error={NO_MATCH_FILTER}"),
    PageSpec("/dead/<score>-<jid>", lambda s: f"/dead/{s.dead_key}"),
    PageSpec("/scheduled", lambda s: "/scheduled"),
    PageSpec("/periodic", lambda s: "/periodic"),
    PageSpec("/jobs/<jid in dead>", lambda s: f"/jobs/{s.dead_jid}"),
    # A job nobody knows of: a page saying so, or the UI's 404 page; either is an answer.
    PageSpec("/jobs/<missing jid>", lambda s: f"/jobs/{MISSING_JID}", frozenset({200, 404})),
]


class PageFailed(Exception):
    """A page that is built answered something other than its expected status."""


def built(app: Starlette, path: str) -> bool:
    """Whether a route of the app takes this path (a page not yet written has none: it 404s)."""
    scope = {"type": "http", "method": "GET", "path": path.split("?")[0], "root_path": ""}
    return any(route.matches(scope)[0] is Match.FULL for route in app.routes)


class Counter:
    """Commands the Redis server ran, from INFO commandstats: a script's inner commands count too
    (Redis counts them under their own names), and the page's own INFO calls; this counter's INFO is
    calibrated away. Also the microseconds Redis spent in scripts: while one runs, Redis serves no
    one else (every worker's fetch waits)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        first = self.snapshot()
        self.own = sum(self.snapshot()[0].values()) - sum(first[0].values())

    def snapshot(self) -> tuple[dict[str, int], dict[str, int]]:
        stats = self.client.info("commandstats")
        calls = {key.removeprefix("cmdstat_"): int(value["calls"]) for key, value in stats.items()}
        usec = {key.removeprefix("cmdstat_"): int(value["usec"]) for key, value in stats.items()}
        return calls, usec

    def between(
        self, before: tuple[dict[str, int], dict[str, int]], after: tuple[dict[str, int], dict[str, int]]
    ) -> tuple[dict[str, int], int]:
        """Calls per command, and the microseconds spent in scripts, between two snapshots."""
        diff = {name: n - before[0].get(name, 0) for name, n in after[0].items()}
        diff["info"] = diff.get("info", 0) - self.own
        script_usec = sum(
            n - before[1].get(name, 0) for name, n in after[1].items() if name in SCRIPT_COMMANDS
        )
        return {name: n for name, n in sorted(diff.items()) if n}, script_usec


class Sent:
    """Commands the app's own client sent (a script call is one, a pipeline its length), counted where
    redis-py sends a command or packs a pipeline: the server-side count minus this is what scripts ran
    inside Redis."""

    def __init__(self, app: Starlette) -> None:
        self.count = 0
        # The client is built (not connected) here; its pool makes every connection from this class.
        pool = app.state.cogworker.client.connection_pool
        base: type[Any] = pool.connection_class
        sent = self

        class Counting(base):  # type: ignore[misc]
            def send_command(self, *args: Any, **kwargs: Any) -> None:
                sent.count += 1
                super().send_command(*args, **kwargs)

            def pack_commands(self, commands: Any) -> Any:
                sent.count += len(commands)
                return super().pack_commands(commands)

        pool.connection_class = Counting


async def _get(http: httpx2.AsyncClient, url: str) -> tuple[float, httpx2.Response]:
    began = time.perf_counter()
    response = await http.get(url)
    return (time.perf_counter() - began) * 1000, response


def _check(spec: PageSpec, url: str, response: httpx2.Response) -> None:
    if response.status_code not in spec.ok:
        # The page's main text (an error page's message), not its head.
        main = re.search(r"<main[^>]*>(.*?)</main>", response.text, re.S)
        text = re.sub(r"<[^>]+>", " ", main.group(1) if main else response.text)
        body = " ".join(text.split())[:300]
        raise PageFailed(f"GET {url} answered {response.status_code} (wanted {sorted(spec.ok)}): {body}")


async def _measure(
    http: httpx2.AsyncClient, counter: Counter, sent: Sent, spec: PageSpec, url: str, repeats: Repeats
) -> dict[str, Any]:
    for _ in range(repeats.warmups):
        _check(spec, url, (await _get(http, url))[1])
    times: list[float] = []
    statuses: set[int] = set()
    before, sent_before = counter.snapshot(), sent.count
    began = time.monotonic()
    while len(times) < repeats.repeats:
        elapsed_ms, response = await _get(http, url)
        _check(spec, url, response)
        times.append(elapsed_ms)
        statuses.add(response.status_code)
        if len(times) >= repeats.min_repeats and time.monotonic() - began > repeats.cap_s:
            break
    calls, script_usec = counter.between(before, counter.snapshot())
    n = len(times)
    sent_per_page = (sent.count - sent_before) / n
    ordered = sorted(times)
    return {
        "url": url,
        "status": sorted(statuses),
        "repeats": n,
        "median_ms": statistics.median(times),
        "p99_ms": ordered[min(n - 1, round(0.99 * (n - 1)))],
        "max_ms": ordered[-1],
        "bytes": len(response.content),
        "commands_per_page": sum(calls.values()) / n,
        "script_calls_per_page": sum(v for k, v in calls.items() if k in SCRIPT_COMMANDS) / n,
        "sent_per_page": sent_per_page,
        "in_scripts_per_page": sum(calls.values()) / n - sent_per_page,
        "script_ms_per_page": script_usec / n / 1000,
        "commands": {name: count / n for name, count in calls.items()},
    }


async def _pages(url: str, seeded: Seeded, repeats: Repeats, say: Callable[[str], None]) -> dict[str, Any]:
    settings = load_settings(redis_url=url, **WEB_SETTING_DEFAULTS)
    app = create_app(settings)
    counter = Counter(redis.Redis.from_url(url, protocol=2, driver_info=None))
    sent = Sent(app)
    figures: dict[str, Any] = {}
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://testserver") as http:
        for spec in PAGES:
            page_url = spec.url(seeded)
            if not built(app, page_url):
                figures[spec.label] = {"url": page_url, "not_built": True}
                continue
            try:
                figures[spec.label] = await _measure(http, counter, sent, spec, page_url, repeats)
            except PageFailed as exc:
                figures[spec.label] = {"url": page_url, "failed": str(exc)}
                say(f"web {seeded.fill.label}: FAILED: {exc}")
                continue
            got = figures[spec.label]
            say(
                f"web {seeded.fill.label}: {spec.label}: p99 {got['p99_ms']:.1f} ms, "
                f"{got['commands_per_page']:.2f} commands ({got['repeats']} requests)"
            )
    counter.client.close()
    return figures


def _more(a: dict[str, Any], b: dict[str, Any]) -> float:
    """How many more commands page `a` sent than page `b` (0 when either has no count)."""
    if "commands_per_page" not in a or "commands_per_page" not in b:
        return 0.0
    return float(a["commands_per_page"] - b["commands_per_page"])


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return abs(_more(a, b)) <= 0.005


def run(client: redis.Redis, url: str, quick: bool, say: Callable[[str], None]) -> dict[str, Any]:
    """The three fills, one after the other, in the bench Redis (flushed for each)."""
    repeats = Repeats.make(quick)
    result: dict[str, Any] = {"target_p99_ms": TARGET_P99_MS, "repeats": dataclasses.asdict(repeats)}
    fills: dict[str, Any] = {}
    result["fills"] = fills
    # Anything else running on the machine shows in the p99s: the load says whether something did.
    result["load_before"] = os.getloadavg()[0]
    for fill, fill_repeats in ((BIG, repeats), (MIDDLE, Repeats.counting()), (SMALL, repeats)):
        seeded = seed(client, fill)
        say(
            f"web {fill.label}: seeded {seeded.keys:,} keys ({seeded.used_memory_human}) "
            f"in {seeded.seconds:.1f} s"
        )
        fills[fill.label] = {
            "fill": dataclasses.asdict(fill),
            "timed": fill_repeats == repeats,
            "seed_s": seeded.seconds,
            "keys": seeded.keys,
            "used_memory": seeded.used_memory_human,
            "pages": asyncio.run(_pages(url, seeded, fill_repeats, say)),
        }
    client.flushdb()
    result["load_after"] = os.getloadavg()[0]
    big, middle, small = (fills[f.label]["pages"] for f in (BIG, MIDDLE, SMALL))
    labels = [spec.label for spec in PAGES]
    result["failed"] = [
        label for label in labels if any(p[label].get("failed") for p in (big, middle, small))
    ]
    same: dict[str, str] = {}
    for page in labels:
        if _more(big[page], middle[page]) > 0.005:
            same[page] = "GROWS"  # more on 100k than on 10k: it reads in proportion to the size
        elif _same(big[page], middle[page]) and _more(big[page], small[page]) > 0.005:
            same[page] = "capped"  # more than on 1k, as many as on 10k: it grows up to a bound
        elif _same(big[page], middle[page]) and _same(big[page], small[page]):
            same[page] = "yes"
        else:
            same[page] = "varies"  # fewer on the bigger fill: a time budget, or chance
    result["same"] = same
    return result
