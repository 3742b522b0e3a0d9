"""What start-up imports before the first job (issue 18): the supervisor starts its fork server before
it imports anything heavy, and nothing on the way to a worker's first job imports what only some
apps use. Checked in a fresh interpreter, as `cogworker-swarm` starts."""

from __future__ import annotations

import subprocess
import sys
import textwrap

LOADED = """
import sys, {module}
print(" ".join(sorted({{m.split(".")[0] for m in sys.modules}} & set({names!r}))))
"""


def loaded(module: str, names: tuple[str, ...]) -> set[str]:
    """Which of the top-level packages `names` a fresh interpreter holds after importing `module`."""
    code = textwrap.dedent(LOADED.format(module=module, names=names))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


def test_the_supervisor_reaches_the_fork_server_spawn_without_heavy_imports() -> None:
    # structlog alone is ~0.1 s; the fork server imports these on its own, beside the supervisor.
    # orjson (~13 ms: it loads dataclasses, uuid, datetime) is first used to read the fork server's
    # "ready"; argparse (~8 ms) only for a command line, which `cogworker-swarm` normally has none of.
    heavy = ("structlog", "pydantic", "pydantic_settings", "redis", "psutil", "asyncio", "orjson", "argparse")
    assert loaded("supervisor.main", heavy) == set()


def test_the_fork_server_and_a_worker_running_an_app_import_no_pydantic() -> None:
    # pydantic and pydantic-settings are ~90 ms, a third of the way to the first job: only the settings
    # check (a child of the fork server) imports them; the rest hold a PlainSettings.
    modules = "supervisor.forkserver.main, supervisor.forkserver.boot, cogworker.worker.launcher, cogworker"
    app = "; cogworker.job(name='app.task')(lambda: None); cogworker.api.client.configure"
    assert loaded(modules + app, ("pydantic", "pydantic_settings", "pydantic_core")) == set()


def test_no_worker_module_imports_croniter_before_a_periodic_job_needs_it() -> None:
    # croniter runs `file` on the interpreter while it is imported (~30 ms with dateutil).
    assert loaded("supervisor.forkserver.boot", ("croniter", "dateutil")) == set()
    assert loaded("cogworker.worker.launcher", ("croniter", "dateutil")) == set()


def test_a_periodic_entry_still_computes_its_slots() -> None:
    code = """
    import cogworker
    from cogworker.api.periodic import Entry
    entry = Entry("every-minute", cogworker.job(name="tick")(lambda: None), "* * * * *")
    slot = entry.slot_at(120.5)
    print(slot, entry.next_after(slot), entry.slots_between(0, 180))
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "120 180 [60, 120]"
