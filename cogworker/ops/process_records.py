"""What `ops.processes` reads of a live process: its presence (cogworker's, or in the Sidekiq mode
Sidekiq's: ops/ruby_processes.py) and the jobs running on it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cogworker import codec


@dataclass(frozen=True, slots=True)
class RunningJob:
    thread: str
    queue: str
    jid: str | None
    job: str | None  # the job's registered name; None when its payload is unreadable
    args: list[Any]
    run_at: float | None
    running_for_s: float | None


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """A live process as its presence hash describes it."""

    identity: str
    hostname: str
    pid: int | None
    tag: str
    version: str
    queues: list[str]
    concurrency: int
    started_at: float | None
    uptime_s: float | None
    busy: int
    rss_bytes: int
    quiet: bool
    beat_age_s: float | None  # seconds since its last beat, both on Redis's clock
    in_progress: int  # length of its in-progress list: fetched and not yet acknowledged
    running: list[RunningJob] = field(default_factory=list)
    # Async jobs it may run at once beside its `concurrency` job threads (0: it has no async job);
    # `busy` counts both kinds.
    async_concurrency: int = 0
    # Told to stop (or signalled) and draining its running jobs; written by heartbeats since the
    # presence hash has a `stopping` field (False for a process of an older version).
    stopping: bool = False
    # "ruby" for a Sidekiq process beside cogworker's in the Sidekiq mode (ops/ruby_processes.py).
    language: str = "python"

    @property
    def is_ruby(self) -> bool:
        return self.language == "ruby"

    @property
    def slots(self) -> int:
        """Jobs it may run at once: its job threads and its async slots."""
        return self.concurrency + self.async_concurrency

    @property
    def capacity(self) -> str:
        """Its job threads, and its async slots where it has any: "10" or "10+100 async"."""
        extra = f"+{self.async_concurrency} async" if self.async_concurrency else ""
        return f"{self.concurrency}{extra}"

    @property
    def slot(self) -> int | None:
        """The swarm slot of a swarm child (its tag is "slot N"); None for a standalone process."""
        word, _, number = self.tag.partition(" ")
        return int(number) if word == "slot" and number.isdigit() else None


def number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def presence_fields(identity: str, presence: dict[str, str], now: float, clock: float) -> dict[str, Any]:
    """The fields cogworker's presence hash and Sidekiq's share (the `info` JSON, `busy`, `beat`), as
    ProcessInfo's keyword arguments; each reader adds those it writes differently (rss, quiet...)."""
    info = codec.loads_dict(presence.get("info", "")) or {}
    started_at = number(info.get("started_at"))
    beat = number(presence.get("beat"))
    pid = number(info.get("pid"))
    return {
        "identity": identity,
        "hostname": str(info.get("hostname") or ""),
        "pid": int(pid) if pid is not None else None,
        "tag": str(info.get("tag") or ""),
        "version": str(info.get("version") or ""),
        "queues": [str(q) for q in info.get("queues") or []],
        "concurrency": int(number(info.get("concurrency")) or 0),
        "async_concurrency": int(number(info.get("async_concurrency")) or 0),
        "started_at": started_at,
        "uptime_s": max(0.0, now - started_at) if started_at is not None else None,
        "busy": int(number(presence.get("busy")) or 0),
        "beat_age_s": max(0.0, clock - beat) if beat is not None else None,
    }
