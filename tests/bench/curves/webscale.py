"""Web UI and CLI at scale: every page of the Web UI and `cogworker status`, with 10k, 100k and 1M
entries in each of the retry, scheduled and dead sets and as many jobs in one queue.

Each size is filled the way cogworker writes it (web_fill.py: pipelined, cogworker's own payloads,
the process records through heartbeat.lua), plus a few running batches and audit records. Then every
page is requested in-process (web_pages.py's ASGI transport: the app's own time, no socket) and
timed, p50 and p99, with the Redis commands and Redis time it cost (INFO commandstats). `cogworker
status` runs as a user runs it: the command pip installed in .bench-venv, a fresh interpreter each
time, timed wall to wall.

A page whose commands or Redis time grow with the set reads in proportion to it; the pages that
search (a filter, the header search, the job page's locate, the failure groups, a batch's failing
members) read up to a time budget instead, so they are judged by their time, not their count.
"""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx2
import redis
from curve import Curve, Metric, Target
from web_fill import BIG_QUEUE, ERROR_FILTER, JOBS, MISSING_JID, NO_MATCH_FILTER, Fill, Seeded, seed
from web_pages import WEB_SETTING_DEFAULTS, Counter, PageFailed, PageSpec, Repeats, Sent, _check, _get, built

from cogworker.ops import audit as audit_ops
from cogworker.settings import load_settings
from cogworker.store import keys
from cogworker.web import create_app

if TYPE_CHECKING:
    from context import Context

TITLE = "Web UI pages and `cogworker status` with 10k, 100k and 1M entries per set and 1M queued"
SIZES = (10_000, 100_000, 1_000_000)
QUICK_SIZES = (1_000, 10_000)
PAGE_BUDGET_MS = 100.0  # the issue's: every page's p99
# `cogworker status` is a command a person types: an answer within a second, interpreter start,
# imports and Redis round trips included, is what one expects of it at any size.
STATUS_BUDGET_MS = 1_000.0
STATUS_RUNS = 10
QUICK_STATUS_RUNS = 3
# The Groups view counts the whole set, reading for up to this long (web/set_groups_web.py): a page
# opened on purpose that says how far it counted, judged against its own budget.
GROUPS_BUDGET_MS = 1_000.0
NAMED = 5  # the costliest pages drawn by name; the rest as one "every other page (max)" series
BATCHES = 20
AUDIT_RECORDS = 200
# The pages that read up to a time budget rather than a fixed slice: their count may vary.
SEARCHING = ("?error=", "?job=", "?args=", "?class=", "/groups", "/search?", "/jobs/", "/batches")


def _middle(s: Seeded) -> int:
    """The page number of the middle of a set (25 a page): a slice deep in the set."""
    return max(1, s.fill.set_size // 2 // 25)


def _last(s: Seeded) -> int:
    return max(1, -(-s.fill.set_size // 25))


PAGES = [
    PageSpec("/", lambda s: "/"),
    PageSpec("/?days=180", lambda s: "/?days=180"),
    PageSpec("/busy", lambda s: "/busy"),
    PageSpec("/queues", lambda s: "/queues"),
    PageSpec("/queues/<big>", lambda s: f"/queues/{BIG_QUEUE}"),
    PageSpec("/queues/<big>?page=<middle>", lambda s: f"/queues/{BIG_QUEUE}?page={_middle(s)}"),
    PageSpec("/queues/<big>?order=next", lambda s: f"/queues/{BIG_QUEUE}?order=next"),
    PageSpec(
        "/queues/<big>?order=next&page=<middle>",
        lambda s: f"/queues/{BIG_QUEUE}?order=next&page={_middle(s)}",
    ),
    PageSpec("/retries", lambda s: "/retries"),
    PageSpec("/retries?page=<middle>", lambda s: f"/retries?page={_middle(s)}"),
    PageSpec("/retries?order=desc", lambda s: "/retries?order=desc"),
    PageSpec(
        "/retries?class=&error_class=",
        lambda s: f"/retries?class={JOBS[1]}&error_class=KeyError",  # one entry in four: a group
    ),
    PageSpec("/retries/groups", lambda s: "/retries/groups"),
    PageSpec("/scheduled", lambda s: "/scheduled"),
    PageSpec("/scheduled?page=<middle>", lambda s: f"/scheduled?page={_middle(s)}"),
    PageSpec("/scheduled?page=<last>", lambda s: f"/scheduled?page={_last(s)}"),
    PageSpec("/scheduled?job=<matches none>", lambda s: "/scheduled?job=app.nothing"),
    PageSpec("/dead", lambda s: "/dead"),
    PageSpec("/dead?page=<middle>", lambda s: f"/dead?page={_middle(s)}"),
    PageSpec("/dead?order=asc", lambda s: "/dead?order=asc"),
    PageSpec(f"/dead?error={ERROR_FILTER}", lambda s: f"/dead?error={ERROR_FILTER}"),
    PageSpec("/dead?error=<matches none>", lambda s: f"/dead?error={NO_MATCH_FILTER}"),
    PageSpec("/dead?args=<matches none>", lambda s: "/dead?args=no-such-argument"),
    PageSpec("/dead/groups", lambda s: "/dead/groups"),
    PageSpec("/dead/<score>-<jid>", lambda s: f"/dead/{s.dead_key}"),
    PageSpec("/jobs/<jid in dead>", lambda s: f"/jobs/{s.dead_jid}"),
    PageSpec("/jobs/<missing jid>", lambda s: f"/jobs/{MISSING_JID}", frozenset({200, 404})),
    PageSpec("/jobs?jid=", lambda s: "/jobs?jid="),
    PageSpec("/search?q=<matches none>", lambda s: "/search?q=no-such-text"),
    PageSpec("/periodic", lambda s: "/periodic"),
    PageSpec("/periodic/entries/<name>", lambda s: "/periodic/entries/periodic-0"),
    PageSpec("/batches", lambda s: "/batches"),
    PageSpec("/batches/<bid>", lambda s: f"/batches/{_bid(0)}"),
    PageSpec("/metrics", lambda s: "/metrics"),
    PageSpec("/metrics/job/<class>", lambda s: f"/metrics/job/{JOBS[0]}"),
    PageSpec("/actions", lambda s: "/actions"),
]


def _bid(n: int) -> str:
    return f"{n:024x}"


def _extras(client: redis.Redis, now: float) -> None:
    """What web_fill doesn't write: running batches (each with pending members, none of them in the
    retry set, so the batch pages' search of it finds nothing: their worst case) and audit records."""
    pipe = client.pipeline(transaction=False)
    for n in range(BATCHES):
        bid = _bid(n)
        fields = {"created_at": now - 600 + n, "holds": 0, "total": 100, "done": 40, "failed": 2, "dead": 1}
        pipe.hset(keys.batch(bid), mapping={**fields, "description": f"import {n}"})
        pipe.sadd(keys.batch_pending(bid), *(f"{bid[:8]}{m:016x}" for m in range(60)))
        pipe.zadd(keys.BATCHES, {bid: now - 600 + n})
    pipe.execute()
    for n in range(AUDIT_RECORDS):
        record = audit_ops.AuditRecord(now - n, "ops", "/dead/retry", f"retried {n}", "ok", "10.0.0.1")
        audit_ops.record(client, record)


class _Usec:
    """Redis time (µs, every command) between two commandstats snapshots of a Counter."""

    @staticmethod
    def between(
        before: tuple[dict[str, int], dict[str, int]], after: tuple[dict[str, int], dict[str, int]]
    ) -> int:
        return sum(n - before[1].get(name, 0) for name, n in after[1].items() if name != "info")


async def _measure(
    http: httpx2.AsyncClient, counter: Counter, spec: PageSpec, url: str, repeats: Repeats
) -> dict[str, float]:
    for _ in range(repeats.warmups):
        _check(spec, url, (await _get(http, url))[1])
    times: list[float] = []
    cpu: list[float] = []
    before = counter.snapshot()
    began = time.monotonic()
    while len(times) < repeats.repeats:
        cpu_began = time.process_time()
        elapsed_ms, response = await _get(http, url)
        cpu.append((time.process_time() - cpu_began) * 1000)
        _check(spec, url, response)
        times.append(elapsed_ms)
        if len(times) >= repeats.min_repeats and time.monotonic() - began > repeats.cap_s:
            break
    after = counter.snapshot()
    calls, _ = counter.between(before, after)
    n = len(times)
    return {
        "p50_ms": statistics.median(times),
        "p99_ms": _p99(times),
        "cpu_p99_ms": _p99(cpu),
        "commands": sum(calls.values()) / n,
        "redis_ms": _Usec.between(before, after) / n / 1000,
    }


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


async def _pages(url: str, seeded: Seeded, repeats: Repeats, say: Callable[[str], None]) -> dict[str, Any]:
    settings = load_settings(redis_url=url, **WEB_SETTING_DEFAULTS)
    app = create_app(settings)
    counter = Counter(redis.Redis.from_url(url, protocol=2, driver_info=None))
    Sent(app)  # the same connection class web_pages measures with
    found: dict[str, Any] = {}
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://testserver") as http:
        for spec in PAGES:
            page_url = spec.url(seeded)
            if not built(app, page_url):
                continue
            try:
                found[spec.label] = await _measure(http, counter, spec, page_url, repeats)
            except PageFailed as exc:
                found[spec.label] = {"failed": str(exc)}
                say(f"webscale {seeded.fill.label}: FAILED: {exc}")
                continue
            got = found[spec.label]
            say(
                f"webscale {seeded.fill.label}: {spec.label}: p50 {got['p50_ms']:.1f} ms, "
                f"p99 {got['p99_ms']:.1f} ms, CPU p99 {got['cpu_p99_ms']:.1f} ms, "
                f"{got['commands']:.1f} commands, Redis {got['redis_ms']:.2f} ms"
            )
    counter.client.close()
    return found


def _status_command() -> list[str]:
    """The `cogworker` command installed beside this interpreter (.bench-venv's, as pip put it)."""
    beside = Path(sys.executable).parent / "cogworker"
    found = str(beside) if beside.exists() else shutil.which("cogworker")
    if found is None:
        raise RuntimeError("no `cogworker` command beside the bench's interpreter (run through run.sh)")
    return [found, "status"]


def _status(ctx: Context, runs: int) -> dict[str, float]:
    """`cogworker status` `runs` times: wall time of each (start to exit), and its Redis commands."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COGWORKER_")}
    env["COGWORKER_REDIS_URL"] = ctx.redis.url
    argv = _status_command()
    subprocess.run(argv, env=env, check=True, capture_output=True, timeout=60)  # warm the page cache
    times: list[float] = []
    cpu: list[float] = []
    before = ctx.redis.commandstats()
    for _ in range(runs):
        began, children = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(argv, env=env, check=True, capture_output=True, timeout=60)
        times.append((time.perf_counter() - began) * 1000)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append((after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime) * 1000)
    calls = sum(n - before.get(name, 0) for name, n in ctx.redis.commandstats().items())
    return {
        "p50_ms": statistics.median(times),
        "max_ms": max(times),
        "cpu_ms": statistics.median(cpu),
        "commands": calls / runs,
    }


def _label(size: int) -> str:
    return f"{size // 1_000_000}M" if size >= 1_000_000 else f"{size // 1_000}k"


def _grows(series: dict[str, dict[int, dict[str, float]]], label: str, sizes: tuple[int, ...]) -> bool:
    """More commands at the largest size than at the smallest, on a page that reads a fixed slice."""
    small, big = series[label].get(sizes[0]), series[label].get(sizes[-1])
    if small is None or big is None or "commands" not in small or "commands" not in big:
        return False
    return big["commands"] - small["commands"] > 0.005


def run(ctx: Context, say: Callable[[str], None]) -> list[Curve]:
    quick = ctx.plan.quick
    sizes = QUICK_SIZES if quick else SIZES
    repeats = (
        Repeats(warmups=2, repeats=20, cap_s=3.0, min_repeats=5)
        if quick
        else Repeats(warmups=5, repeats=100, cap_s=6.0, min_repeats=20)
    )
    client = redis.Redis.from_url(ctx.redis.url, decode_responses=True)
    by_page: dict[str, dict[int, dict[str, float]]] = {spec.label: {} for spec in PAGES}
    status: dict[int, dict[str, float]] = {}
    load: list[float] = []
    try:
        for size in sizes:
            fill = Fill(_label(size), set_size=size, big_queue=size)
            seeded = seed(client, fill)
            _extras(client, time.time())
            say(
                f"webscale {fill.label}: seeded {seeded.keys:,} keys ({seeded.used_memory_human}) "
                f"in {seeded.seconds:.1f} s"
            )
            load.append(os.getloadavg()[0])
            for label, figures in asyncio.run(_pages(ctx.redis.url, seeded, repeats, say)).items():
                by_page[label][size] = figures
            status[size] = _status(ctx, QUICK_STATUS_RUNS if quick else STATUS_RUNS)
            say(
                f"webscale {fill.label}: cogworker status: p50 {status[size]['p50_ms']:.0f} ms, "
                f"max {status[size]['max_ms']:.0f} ms, {status[size]['commands']:.0f} commands"
            )
    finally:
        client.flushdb()
        client.close()
    return [_pages_curve(by_page, sizes, load), _status_curve(status, sizes)]


def _pages_curve(
    by_page: dict[str, dict[int, dict[str, float]]], sizes: tuple[int, ...], load: list[float]
) -> Curve:
    curve = Curve(
        name="webscale",
        title="Web UI pages at scale",
        x_label="entries per set (retry, scheduled, dead) and jobs in the big queue",
        x_log=True,
        metrics=[
            Metric("p99_ms", "page time p99", "ms", "↓"),
            Metric("p50_ms", "page time p50", "ms", "↓"),
            # The app's own CPU (this process, every thread) per request, and Redis's: what a page
            # costs whatever else runs on the machine, where the wall times above are inflated by it.
            Metric("cpu_p99_ms", "app CPU per page p99", "ms", "↓"),
            Metric("commands", "Redis commands per page", "commands", "↓"),
            Metric("redis_ms", "Redis time per page", "ms", "↓"),
        ],
    )
    failed = sorted(label for label, points in by_page.items() if any("failed" in p for p in points.values()))
    timed = {label: points for label, points in by_page.items() if label not in failed and points}
    top = sizes[-1]
    # Ranked by what a page costs itself (its CPU and Redis time), not by its wall time, which
    # whatever else runs on the machine reorders from run to run.
    ranked = sorted(timed, key=lambda label: -_cost(timed[label].get(top, _ZERO)))
    named = ranked[:NAMED]
    for label in named:
        for size, figures in timed[label].items():
            curve.add(label, size, **figures)
    rest = [label for label in ranked if label not in named]
    for size in sizes:
        points = [timed[label][size] for label in rest if size in timed[label]]
        if points:
            worst = {
                key: max(p[key] for p in points)
                for key in ("p99_ms", "p50_ms", "cpu_p99_ms", "commands", "redis_ms")
            }
            curve.add(f"every other page (max of {len(rest)})", size, **worst)
    paged = [label for label in ranked if not label.endswith("/groups")]
    for text, key, figure in (
        ("p99", "p99_ms", lambda f: f["p99_ms"]),
        ("app CPU p99 + Redis time (what it costs on a quiet machine)", "cpu", lambda f: _cost(f)),
    ):
        over = [
            label for label in paged if figure(timed[label].get(top, {key: 0.0, **_ZERO})) > PAGE_BUDGET_MS
        ]
        worst = max(paged, key=lambda label: figure(timed[label].get(top, {key: 0.0, **_ZERO})), default=None)
        curve.targets.append(
            Target(
                f"every page's {text} ≤ {PAGE_BUDGET_MS:.0f} ms at {_label(top)} per set "
                "(but the two Groups counts, below)",
                None if worst is None or failed else not over,
                "slowest: "
                + (f"{worst} {figure(timed[worst][top]):.1f} ms" if worst else "none")
                + (f"; over: {', '.join(over)}" if over else "")
                + (f"; FAILED: {', '.join(failed)}" if failed else ""),
            )
        )
    groups = [label for label in ranked if label.endswith("/groups") and top in timed[label]]
    limit_ms = GROUPS_BUDGET_MS + PAGE_BUDGET_MS
    curve.targets.append(
        Target(
            f"the Groups counts (`/retries/groups`, `/dead/groups`) within their {GROUPS_BUDGET_MS:.0f} ms "
            f"counting budget plus a page's {PAGE_BUDGET_MS:.0f} ms",
            None if not groups else all(_cost(timed[label][top]) <= limit_ms for label in groups),
            ", ".join(
                f"{label}: p99 {timed[label][top]['p99_ms']:.0f} ms, "
                f"CPU + Redis {_cost(timed[label][top]):.0f} ms"
                for label in groups
            ),
        )
    )
    fixed = [label for label in timed if not any(s in label for s in SEARCHING)]
    growing = [label for label in fixed if _grows(timed, label, sizes)]
    curve.targets.append(
        Target(
            f"Redis commands per page the same at {_label(sizes[0])} and {_label(top)} "
            "(the pages that read a slice)",
            not growing,
            f"{len(fixed)} pages" + (f"; growing: {', '.join(growing)}" if growing else ", none grows"),
        )
    )
    curve.notes.append(
        "Peers: Sidekiq's Web UI (a Rack app) is not measured here: it needs Sidekiq's own payloads "
        "filled at 1M and a Rack server; Dramatiq has no Web UI of its own."
    )
    curve.notes.append(
        f"{len(timed)} pages; each page requested in-process (ASGI, no socket), "
        "p99 of up to 100 requests; the summary bar every page shows is included."
    )
    curve.notes.append(f"load average when each size began: {', '.join(f'{x:.1f}' for x in load)}")
    for label in rest:
        figures = timed[label].get(top)
        if figures:
            curve.notes.append(
                f"{label} at {_label(top)}: p50 {figures['p50_ms']:.1f} ms, p99 {figures['p99_ms']:.1f} ms, "
                f"{figures['commands']:.1f} commands"
            )
    return curve


_ZERO = {"p99_ms": 0.0, "cpu_p99_ms": 0.0, "redis_ms": 0.0}


def _cost(figures: dict[str, float]) -> float:
    """A page's own cost, whatever else the machine runs: its CPU (p99) and its Redis time."""
    return figures["cpu_p99_ms"] + figures["redis_ms"]


def _status_curve(status: dict[int, dict[str, float]], sizes: tuple[int, ...]) -> Curve:
    curve = Curve(
        name="webscale-status",
        title="`cogworker status` at scale",
        x_label="entries per set (retry, scheduled, dead) and jobs in the big queue",
        x_log=True,
        metrics=[
            Metric("p50_ms", "wall time p50", "ms", "↓"),
            Metric("max_ms", "wall time max", "ms", "↓"),
            Metric("cpu_ms", "its CPU (user + system) p50", "ms", "↓"),
            Metric("commands", "Redis commands per run", "commands", "↓"),
        ],
    )
    for size, figures in status.items():
        curve.add("cogworker status", size, **figures)
    top = status.get(sizes[-1])
    curve.targets.append(
        Target(
            f"`cogworker status` within {STATUS_BUDGET_MS:.0f} ms at {_label(sizes[-1])} per set "
            "(wall time, p50 of the runs)",
            None if top is None else top["p50_ms"] <= STATUS_BUDGET_MS,
            "—"
            if top is None
            else f"p50 {top['p50_ms']:.0f} ms, max {top['max_ms']:.0f} ms, CPU {top['cpu_ms']:.0f} ms",
        )
    )
    small = status.get(sizes[0])
    if small is not None and top is not None:
        curve.targets.append(
            Target(
                f"its Redis commands the same at {_label(sizes[0])} and {_label(sizes[-1])}",
                abs(top["commands"] - small["commands"]) < 0.5,
                f"{small['commands']:.0f} and {top['commands']:.0f}",
            )
        )
    curve.notes.append(
        "The command pip installed in .bench-venv, a fresh interpreter each run (start-up and imports "
        "included), against 50 live processes and 201 queues."
    )
    return curve
