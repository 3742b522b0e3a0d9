"""What the backlog and payload curves share: filling a queue fast, and timing a drain's window.

A window is measured from outside, as W1's backlog window is (throughput.py): from the first poll
that sees `start` jobs done to the first that sees `end`, while every worker still has jobs waiting.
At each edge the harness reads Redis's commandstats, the CPU of the workers and of Redis, and the done
counter, in that order, so the figures divide by the jobs done between the two edges exactly (give or
take the few jobs that finish between a snapshot and the GET right behind it).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jobkit
import redis
from context import Context
from procs import WorkerGroup, memory
from redis_server import delta
from systems.base import System
from throughput import CpuSample

# The systems every curve here measures, by bench name, with their series names.
SERIES = {"cogworker": "cogworker", "sidekiq-yjit": "Sidekiq + YJIT", "dramatiq": "Dramatiq"}
POLL_S = 0.05
FILL_CHUNK = 10_000  # entries per LPUSH/RPUSH (and HSET) of a fill
FILL_PIPELINE = 10  # such commands per round trip


@dataclass
class Edge:
    at: float
    done: int
    gets: int  # GETs of the done counter the harness had sent before this edge's commandstats
    cpu: CpuSample
    stats: dict[str, int]
    memory: dict[str, Any] = field(default_factory=dict)


def used_memory(ctx: Context) -> int:
    return int(ctx.client.info("memory")["used_memory"])


def drain_window(
    ctx: Context,
    system: System,
    label: str,
    target: int,
    start: int,
    end: int,
    timeout_s: float,
    env: dict[str, str] | None = None,
    take_memory: bool = False,
) -> dict[str, Any]:
    """Start `system`'s workers on what is queued, measure the window from `start` to `end` jobs done,
    and stop them once `target` jobs are done (the rest of a backlog stays queued)."""
    ctx.reset_bench_keys()
    gets = 0
    edges: list[Edge] = []

    def done() -> int:
        nonlocal gets
        gets += 1
        return ctx.done()

    def edge(group: WorkerGroup) -> Edge:
        stats = ctx.redis.commandstats()
        cpu = CpuSample.take(ctx, group)
        sent = gets
        taken = Edge(time.monotonic(), done(), sent, cpu, stats)
        if take_memory:
            taken.memory = memory(group).as_dict()
        return taken

    group = ctx.start(system, label, {"BENCH_TARGET": str(target), **(env or {})})
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            group.ensure_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{system.name}: gave up after {timeout_s:.0f} s ({label})")
            now_done = done()
            if not edges and now_done >= start:
                edges.append(edge(group))
            elif edges and now_done >= end:
                edges.append(edge(group))
                break
            time.sleep(POLL_S)
        while ctx.done() < target and time.monotonic() < deadline:
            time.sleep(POLL_S)
    finally:
        ctx.stop(group)
    first, last = edges
    jobs = last.done - first.done
    if first.done >= end:
        raise RuntimeError(f"{system.name}: the window ({start} to {end} jobs) passed between two polls")
    calls = delta(first.stats, last.stats)
    # The harness's own commands in the window: its GETs of the counter, and the jobs' INCR.
    calls[system.done_command] = calls.get(system.done_command, 0) - jobs
    calls["get"] = calls.get("get", 0) - (last.gets - first.gets)
    own = {name: n for name, n in calls.items() if n > 0}
    return {
        "jobs": jobs,
        "jobs_per_s": jobs / (last.at - first.at),
        "worker_cpu_us": (last.cpu.workers + last.cpu.parent - first.cpu.workers - first.cpu.parent)
        * 1e6
        / jobs,
        "redis_cpu_us": (last.cpu.redis - first.cpu.redis) * 1e6 / jobs,
        "commands": sum(own.values()) / jobs,
        "calls": own,
        "memory": [first.memory, last.memory] if take_memory else [],
    }


@dataclass(frozen=True)
class Template:
    """One stored job of a system, with its ids as placeholders: `text.format(*ids)` is a new job."""

    list_key: str
    text: str  # the list entry (dramatiq: the hash value; its list holds the id)
    ids: int  # how many fresh ids a job needs
    class_chars: int  # the length of the job's name as stored (`class`; dramatiq: `actor_name`)
    hash_key: str = ""  # dramatiq: the hash its messages are kept in, by id
    push_left: bool = True


def template_of(system: System, client: redis.Redis) -> Template:
    """Push one no-op job through the system's own client and turn what it stored into a template;
    the job itself is taken away again (its queue's registration stays, as a real backlog's would)."""
    system.push_noop()
    if system.name == "dramatiq":
        queue, msgs = "dramatiq:default", "dramatiq:default.msgs"
        message_key = client.rpop(queue)
        assert message_key is not None, "dramatiq stored no message"
        redis_id = message_key.decode()
        text = client.hget(msgs, redis_id).decode()  # type: ignore[union-attr]
        client.hdel(msgs, redis_id)
        message = json.loads(text)
        pattern = _escape(text).replace(message["message_id"], "{0}").replace(redis_id, "{1}")
        return Template(queue, pattern, 2, len(message["actor_name"]), hash_key=msgs, push_left=False)
    key = system.queue_key  # type: ignore[attr-defined]
    raw = client.lpop(key)
    assert raw is not None, f"{system.name} stored no job at {key}"
    text = raw.decode()
    job = json.loads(text)
    return Template(key, _escape(text).replace(job["jid"], "{0}"), 1, len(job["class"]))


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _jids(count: int) -> list[str]:
    hexed = os.urandom(12 * count).hex()
    return [hexed[i : i + 24] for i in range(0, 24 * count, 24)]


def _uuids(count: int) -> list[str]:
    """Random ids spelled as dramatiq's uuid4 strings (8-4-4-4-12 hex digits), without a UUID object
    each: at 5M jobs, uuid.UUID took most of the fill's time."""
    hexed = os.urandom(16 * count).hex()
    return [
        f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{h[16:20]}-{h[20:]}"
        for h in (hexed[i : i + 32] for i in range(0, 32 * count, 32))
    ]


def fill(client: redis.Redis, template: Template, count: int, say: Callable[[str], None]) -> float:
    """Queue `count` copies of the template, each with fresh ids, in pipelined chunks; seconds taken."""
    began = time.monotonic()
    pipe = client.pipeline(transaction=False)
    for queued, begin in enumerate(range(0, count, FILL_CHUNK), start=1):
        size = min(FILL_CHUNK, count - begin)
        if template.hash_key:
            redis_ids = _uuids(size)
            texts = [template.text.format(m, r) for m, r in zip(_uuids(size), redis_ids, strict=True)]
            pipe.hset(template.hash_key, mapping=dict(zip(redis_ids, texts, strict=True)))
            pipe.rpush(template.list_key, *redis_ids)
        else:
            texts = [template.text.format(jid) for jid in _jids(size)]
            (pipe.lpush if template.push_left else pipe.rpush)(template.list_key, *texts)
        if queued % FILL_PIPELINE == 0:
            pipe.execute()
    pipe.execute()
    took = time.monotonic() - began
    if count >= 1_000_000:
        say(f"  filled {count:,} jobs in {took:.1f} s")
    return took


def entry_bytes(client: redis.Redis, template: Template) -> int:
    """A stored job's length: the list entry, and for dramatiq the message plus its id in the list."""
    if template.hash_key:
        message_id = client.lindex(template.list_key, 0)
        assert message_id is not None
        return len(client.hget(template.hash_key, message_id) or b"") + len(message_id)
    found = client.lindex(template.list_key, 0)
    assert found is not None
    return len(found)


def raw_client(ctx: Context) -> redis.Redis:
    """A bytes client on the bench Redis (the fill's pipelines; the context's own client decodes)."""
    return jobkit.connect(ctx.redis.url)
