"""Jobs for the TLS + ACL tests (tests/e2e/tls/). They record what happened in files, not Redis: the
server demands a client certificate, and the ACL user may only touch cogworker's own keys."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import cogworker
from cogworker import Death, job, on_death


def _note(path: str, line: str) -> None:
    with open(path, "a") as out:
        out.write(f"{line}\n")


@job
def note(path: str, tag: str) -> None:
    _note(path, f"{tag} {os.getpid()}")


@job
async def anote(path: str, tag: str) -> None:
    await asyncio.sleep(0.01)
    _note(path, f"async-{tag} {os.getpid()}")


@job(retry=3)
def fail_first(path: str, tag: str) -> None:
    """Fails on its first run (a marker file says it ran once), succeeds on the retry."""
    marker = Path(f"{path}.{tag}.tried")
    if not marker.exists():
        marker.write_text("tried\n")
        raise RuntimeError(f"first try of {tag} fails")
    _note(path, f"retried-{tag} {os.getpid()}")


@job
def die_first(path: str, tag: str) -> None:
    """SIGKILLs its own process on its first run; the run after recovery records it."""
    marker = Path(f"{path}.{tag}.died")
    if not marker.exists():
        marker.write_text(f"{os.getpid()}\n")
        os.kill(os.getpid(), 9)
    _note(path, f"recovered-{tag} {os.getpid()}")


@job(unique="until_executed", status=True)
def unique_note(path: str, tag: str) -> None:
    """A unique claim and a status record: both live in Redis under cogworker:*."""
    _note(path, f"unique-{tag} {os.getpid()}")


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
        _note(f"{args[0]}.deaths", f"{args[1]} {death.cause}")


@job
def batch_done(bid: str, path: str) -> None:
    """A batch's callback (tests/e2e/tls/test_tls_batch.py): gets the batch's id first."""
    _note(path, f"callback {bid}")


# Limited jobs (tests/e2e/tls/test_tls_batch_limits.py): the window and bucket checks and the
# concurrent limiter's acquire and release are scripts of their own, with commands a plain job never
# sends.
@job(limit=cogworker.limiter.window("tls-window", 100, per=60))
def windowed(path: str, tag: str) -> None:
    _note(path, tag)


@job(limit=cogworker.limiter.bucket("tls-bucket", 100))
def bucketed(path: str, tag: str) -> None:
    _note(path, tag)


# One slot for two jobs: the second waits for the first's release (or its slot handed on).
@job(limit=cogworker.limiter.concurrent("tls-concurrent", 1, lease_s=30))
def concurrent(path: str, tag: str) -> None:
    _note(path, tag)
