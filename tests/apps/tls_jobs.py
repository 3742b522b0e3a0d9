"""Jobs for the TLS + ACL tests (tests/e2e/tls/). They record what happened in files, not Redis: the
server demands a client certificate, and the ACL user may only touch cogworker's own keys."""

from __future__ import annotations

import asyncio
from typing import Any

import file_notes
from line_sink import append_line

import cogworker
from cogworker import Death, job, on_death


@job
def note(path: str, tag: str) -> None:
    file_notes.note(path, tag)


@job
async def anote(path: str, tag: str) -> None:
    await asyncio.sleep(0.01)
    file_notes.note(path, f"async-{tag}")


@job(retry=3)
def fail_first(path: str, tag: str) -> None:
    """Fails on its first run, succeeds on the retry."""
    file_notes.fail_first(path, tag)


@job
def die_first(path: str, tag: str) -> None:
    """SIGKILLs its own process on its first run; the run after recovery records it."""
    file_notes.die_first(path, tag)


@job(unique="until_executed", status=True)
def unique_note(path: str, tag: str) -> None:
    """A unique claim and a status record: both live in Redis under cogworker:*."""
    file_notes.note(path, f"unique-{tag}")


# Job execution features over TLS as the ACL user: results, cancellation, expiry and death hooks.
@job(result_ttl=60)
def doubled(n: int) -> int:
    return n * 2


@job(retry=False)
def doomed(path: str, tag: str) -> None:
    raise RuntimeError(f"{tag} always fails")


@on_death
def _note_death(job_payload: dict[str, Any], death: Death) -> None:
    args = job_payload.get("args") or []
    if job_payload.get("class") == "tls_jobs.doomed" and args:
        append_line(f"{args[0]}.deaths", f"{args[1]} {death.cause}")


@job
def batch_done(bid: str, path: str) -> None:
    """A batch's callback (tests/e2e/tls/test_tls_batch.py): gets the batch's id first."""
    append_line(path, f"callback {bid}")


# Limited jobs (tests/e2e/tls/test_tls_batch_limits.py): the window and bucket checks and the
# concurrent limiter's acquire and release are scripts of their own, with commands a plain job never
# sends.
@job(limit=cogworker.limiter.window("tls-window", 100, per=60))
def windowed(path: str, tag: str) -> None:
    append_line(path, tag)


@job(limit=cogworker.limiter.bucket("tls-bucket", 100))
def bucketed(path: str, tag: str) -> None:
    append_line(path, tag)


# One slot for two jobs: the second waits for the first's release (or its slot handed on).
@job(limit=cogworker.limiter.concurrent("tls-concurrent", 1, lease_s=30))
def concurrent(path: str, tag: str) -> None:
    append_line(path, tag)
