"""The integrations stay out of a process that doesn't turn them on. Without the extras installed
(simulated: a finder that refuses both libraries, as an environment without them would) the job API,
a push and everything `cogworker run` and `cogworker-swarm` import on their way up still load, and
no `cogworker.contrib` module is imported. (redis-py itself imports OpenTelemetry when it is
installed, for its own metrics: that is redis-py's, not cogworker's.)"""

from __future__ import annotations

from typing import Any

from tests.support.first_call import first_call


def test_the_core_runs_without_either_library(r: Any, redis_server: Any) -> None:
    out = first_call(
        """
        import sys

        class Absent:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("opentelemetry", "sentry_sdk"):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None

        sys.meta_path.insert(0, Absent())
        import cogworker, demo_jobs
        import cogworker.cli.main, cogworker.worker.main, cogworker.worker.launcher, supervisor.main
        print(demo_jobs.record.perform_async("x") is not None)
        optional = ("cogworker.contrib", "opentelemetry", "sentry_sdk")
        print(sorted(m for m in sys.modules if m.startswith(optional)))
        """,
        redis_server.url,
    )
    assert out.splitlines() == ["True", "[]"]
