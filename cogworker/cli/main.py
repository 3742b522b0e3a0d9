"""The `cogworker` command line: `cogworker run` and the operations verbs."""

from __future__ import annotations

import argparse
import sys

from cogworker import exitcodes
from cogworker.settings import load_or_exit


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cogworker",
        description="Redis-backed background jobs. Settings come from COGWORKER_* variables.",
    )
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    sub.add_parser(
        "run",
        help="run one worker process (what each cogworker-swarm child runs)",
        description="Run one worker process. TERM/INT: stop (drain for COGWORKER_TIMEOUT_S, then requeue "
        "what is left). USR1/TSTP: quiet. TTIN: log every thread's stack. Exit codes: 0 stopped, "
        "3 the app (COGWORKER_REQUIRE) failed to import, 78 bad settings.",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verb is None:
        parser.print_help()
        return exitcodes.USAGE
    settings = load_or_exit()
    if args.verb == "run":
        from cogworker.worker import main as run_main

        return run_main(settings)
    return exitcodes.USAGE


if __name__ == "__main__":
    sys.exit(main())
