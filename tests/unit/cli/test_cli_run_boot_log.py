"""What a worker says at boot about the jobs it knows (cogworker/worker/main.py): a real worker's
lines are checked by tests/e2e/cli/; here, which jobs count and each message."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

import cogworker.api.group_jobs  # noqa: F401  cogworker's own jobs, registered on import
from cogworker import job
from cogworker.api import registry
from cogworker.api.chain_group import NAME_CONTINUE, NAME_DIED
from cogworker.worker.main import log_registered_jobs


@job
def boot_log_probe() -> None:
    """A job of this module, registered at import as an app's would be."""


def test_the_apps_jobs_are_counted_at_info_and_named_at_debug_without_cogworkers_own() -> None:
    names = registry.app_job_names()
    assert boot_log_probe.name in names
    assert NAME_CONTINUE not in names and NAME_DIED not in names
    assert registry.is_registered(NAME_CONTINUE)  # registered, and still left out
    with capture_logs() as logs:
        log_registered_jobs((__name__,))
    assert logs == [
        {"event": "jobs_registered", "count": len(names), "log_level": "info"},
        {"event": "jobs_registered_names", "jobs": names, "log_level": "debug"},
    ]


@pytest.mark.parametrize(
    ("required", "says"),
    [((), "COGWORKER_REQUIRE is unset"), (("myapp.empty",), "COGWORKER_REQUIRE's modules define no @job")],
)
def test_a_worker_knowing_no_job_warns(
    required: tuple[str, ...], says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only cogworker's own jobs known, as in a worker whose app defines none.
    own = {name: found for name, found in registry._registry.items() if name in (NAME_CONTINUE, NAME_DIED)}
    monkeypatch.setattr(registry, "_registry", own)
    with capture_logs() as logs:
        log_registered_jobs(required)
    [warning] = logs
    assert (warning["event"], warning["log_level"]) == ("no_jobs_registered", "warning")
    assert says in warning["note"]
    assert ("`cogworker run MODULE`" in warning["note"]) == (not required)
    assert warning.get("require") == (",".join(required) or None)
