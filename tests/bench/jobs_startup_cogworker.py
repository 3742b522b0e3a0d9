"""The start-up curve's one-job app for cogworker (curves/startup.py): W1's no-op job alone, under the
name the bench's pusher gives it (systems/cogworker_system.py pushes jobs_cogworker.noop). With
BENCH_STACK=1 it imports a typical app's modules first (startup_stack.py), as the peers' apps do."""

from __future__ import annotations

import os

if os.environ.get("BENCH_STACK") == "1":
    import startup_stack  # noqa: F401

import jobkit

from cogworker import job


@job(name="jobs_cogworker.noop", queue="default")
def noop() -> None:
    jobkit.mark_done()
