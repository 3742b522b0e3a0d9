"""`python manage.py cogworker VERB ...`: the `cogworker` command line, configured by the project.

Every verb of `cogworker` passes through untouched (`run -Q emails`, `status --json`, `dead list`),
and `swarm` runs `cogworker-swarm`. Before any of them, what settings.COGWORKER gives and the
environment doesn't is exported as COGWORKER_* variables (conf.export_environment), with
DJANGO_SETTINGS_MODULE and this integration's worker module first in COGWORKER_REQUIRE: the command,
and every process it starts, reads the settings the web processes read, the environment winning.

`run` and the other verbs run in this process, which Django has set up already (so the apps' `jobs`
modules are imported). `swarm` replaces this process with a fresh interpreter running the supervisor
(same pid, so the signals a service manager sends reach it): the supervisor forks its first fork
server from itself and counts on nothing heavy being loaded there yet, and its workers set Django up
from the exported environment.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from cogworker.contrib.django import conf

# Django's own options, which `manage.py` reads before it runs a command and leaves in its argv.
DJANGO_OPTIONS = ("--settings", "--pythonpath")
SWARM = "import sys; from supervisor.main import main; sys.exit(main(sys.argv[1:]))"


def cogworker_argv(argv: list[str]) -> list[str]:
    """`argv` without Django's --settings/--pythonpath (already applied by manage.py)."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in DJANGO_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(f"{option}=" for option in DJANGO_OPTIONS)):
            kept.append(arg)
    return kept


def run(argv: list[str]) -> int:
    """Export the project's settings, then run `cogworker ARGV` (or the supervisor for `swarm`)."""
    conf.export_environment()
    if argv[:1] == ["swarm"]:
        _exec_swarm(argv[1:])
    from cogworker.cli.main import main

    return main(argv)


def _exec_swarm(argv: list[str]) -> None:
    # The directory manage.py is in (sys.path[0]) holds the project: the new interpreter and the
    # fork servers it starts must import the settings module from it, wherever the command runs.
    project = sys.path[0] or os.getcwd()
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (project, os.environ.get("PYTHONPATH")) if p)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-c", SWARM, *argv])


class Command(BaseCommand):  # type: ignore[misc]
    help = (
        "Run cogworker with this project's settings (settings.COGWORKER; COGWORKER_* variables win): "
        "`run`, `swarm`, and every other `cogworker` verb (`manage.py cogworker --help` lists them)."
    )

    def run_from_argv(self, argv: list[str]) -> None:
        """`manage.py cogworker ...`: the arguments go to `cogworker` as they are, --help included."""
        sys.exit(run(cogworker_argv(argv[2:])))

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("args", nargs=argparse.REMAINDER, help="a cogworker verb and its options")

    def handle(self, *args: str, **options: Any) -> None:
        """`call_command("cogworker", "status", "--json")`: a failure is a CommandError with its code."""
        code = run(list(args))
        if code:
            raise CommandError(f"cogworker {' '.join(args)} exited {code}", returncode=code)
