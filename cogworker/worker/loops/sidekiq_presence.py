"""A cogworker process as Sidekiq sees one, in the Sidekiq mode (COGWORKER_SIDEKIQ_COMPAT).

Sidekiq's API and Web UI know a process by the hash at key `<identity>` (under the shared start) and
drop from the shared `processes` set every member without one. So each cogworker process in the mode
writes that hash too, in Sidekiq's shape, with the jobs it runs in Sidekiq's busy-jobs hash, and reads
Sidekiq's signal list: all on the same round trip as its own beat (heartbeat.lua's Sidekiq section).
Its own presence (`cogworker:process:<identity>`) and liveness are written as without the mode.

What Sidekiq reads, and where (Sidekiq 6.4's launcher.rb/api.rb/processor.rb, 7.3's the same):
- `info`: JSON, written once: hostname, started_at (float s), pid, tag, concurrency, queues, labels,
  identity; Sidekiq 7 adds version, weights (one {queue: weight} per capsule; 0 = strict order) and
  embedded. The label "cogworker" marks the process as ours for cogworker's own readers (a Sidekiq
  presence without it and without a cogworker presence is a Ruby process).
- `busy` (int), `beat` (float epoch s, this host's clock), `quiet` ("true"/"false"), `rss` (KB),
  `rtt_us` (int µs: here the previous beat's round trip, Sidekiq times a PING). TTL 60 s (or the
  presence TTL, when that is longer).
- busy jobs: thread -> JSON {queue, payload, run_at (int epoch s)}. Sidekiq 6 readers since 6.2 take
  the payload as an object or a string, 6.0's only as an object, so mode 6 writes the object; Sidekiq
  7 writes and reads a string. A payload longer than PAYLOAD_MAX_CHARS has its arguments cut as the
  work hash cuts them (heartbeat.SUMMARY_ARGS_CHARS): Sidekiq writes the whole job every beat, which
  for a large job is megabytes a second into Redis and into every Busy page.
- signals: a list Sidekiq's Process#quiet!/stop!/dump_threads LPUSH TSTP/TERM/TTIN onto; each beat
  takes one (RPOP), as Sidekiq's does.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Sequence
from typing import Any

from cogworker import codec
from cogworker.settings_fields import QueueSpec
from cogworker.store import keys, sidekiq_keys

# Sidekiq's, for the presence hash and the busy-jobs hash alike; longer with a longer
# COGWORKER_PRESENCE_TTL_S, so that beats further apart than Sidekiq's never let the process vanish.
PRESENCE_TTL_S = 60
PAYLOAD_MAX_CHARS = 10_000
LABEL = "cogworker"
# Sidekiq's signals -> cogworker's remote commands (the launcher's command pipe): TERM is what
# `cogworker stop` does, TSTP `cogworker quiet`, and TTIN the thread dump SIGTTIN gives.
SIGNALS = {"TSTP": "quiet", "TERM": "stop", "TTIN": "dump"}


def info(
    identity: str,
    queue_spec: QueueSpec,
    *,
    concurrency: int,
    tag: str,
    version: str,
    started_at: float,
    pid: int | None = None,
    hostname: str | None = None,
) -> dict[str, Any]:
    """The `info` field's object for this mode's Sidekiq version."""
    names = list(dict.fromkeys(queue_spec.names))
    found: dict[str, Any] = {
        "hostname": hostname or socket.gethostname(),
        "started_at": started_at,
        "pid": os.getpid() if pid is None else pid,
        "tag": tag,
        "concurrency": concurrency,
        "queues": names,
        "labels": [LABEL],
        "identity": identity,
    }
    if keys.SIDEKIQ == "7":
        weights = queue_spec.weights or (0,) * len(queue_spec.names)
        found["weights"] = [dict(zip(queue_spec.names, weights, strict=True))]
        # Sidekiq 7's Busy page shows a version that isn't its own: "cogworker 1.2.3" says what runs.
        found["version"] = f"cogworker {version}"
        found["embedded"] = False
    return found


def busy_entry(item: dict[str, Any], job: dict[str, Any] | None, bounded_args: list[Any]) -> str:
    """One busy-jobs hash value for a running job. `item`: queue, payload (its text) and run_at as the
    launcher gives them; `job`: the payload decoded (None when it isn't a JSON object); `bounded_args`:
    its arguments as the work hash cuts them."""
    raw = item.get("payload")
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw or "")
    exact: str | None = text  # the payload as it came, which is what Sidekiq 7 writes
    if job is None:
        # A Sidekiq 6.4 reader parses a string payload as JSON and fails the whole Busy page on one
        # that isn't: an unreadable payload is shown as a job of no class instead.
        job, exact = {"class": "(unreadable payload)", "args": [codec.escape(text[:100])], "jid": None}, None
    elif len(text) > PAYLOAD_MAX_CHARS:
        job, exact = {**job, "args": bounded_args}, None
    payload: Any = job
    if keys.SIDEKIQ == "7":
        payload = exact if exact is not None else codec.dumps(job)
    run_at = item.get("run_at")
    entry = {
        "queue": item.get("queue"),
        "payload": payload,
        "run_at": int(run_at) if isinstance(run_at, int | float) else int(time.time()),
    }
    return codec.dumps(entry)


class SidekiqPresence:
    """The Sidekiq section of one process's beat: its keys, and the arguments heartbeat.lua takes."""

    def __init__(self, identity: str, info_json: str, ttl_s: int = PRESENCE_TTL_S) -> None:
        self.identity = identity
        self.info_json = info_json
        self.ttl_s = ttl_s
        self.keys = [
            sidekiq_keys.presence(identity),
            sidekiq_keys.busy_jobs(identity),
            sidekiq_keys.signals(identity),
        ]

    def args(
        self, *, busy: int, quiet: bool, rss_bytes: int, rtt_us: int, entries: Sequence[str]
    ) -> list[Any]:
        """The arguments after cogworker's own, with their count last (heartbeat.lua says why)."""
        section: list[Any] = [
            self.info_json,
            busy,
            repr(time.time()),
            "true" if quiet else "false",
            rss_bytes // 1024,
            rtt_us,
            self.ttl_s,
            *entries,
        ]
        return [*section, len(section)]

    def clear(self, pipe: Any) -> None:
        """On a clean stop, beside cogworker's own clear: gone from Sidekiq's view at once (Sidekiq's
        clear_heartbeat leaves the hash to expire; deleting it too changes nothing Sidekiq reads)."""
        for key in self.keys:
            pipe.delete(key)


def written_by_cogworker(info_text: str) -> bool:
    """Whether a Sidekiq presence's `info` is one of cogworker's processes' (its label says so)."""
    labels = (codec.loads_dict(info_text) or {}).get("labels")
    return isinstance(labels, list) and LABEL in labels


def command_for(signal_name: str) -> str | None:
    return SIGNALS.get(signal_name)
