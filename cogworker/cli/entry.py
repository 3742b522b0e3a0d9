"""The `cogworker` command's entry point: `cogworker swarm` straight to the supervisor, anything else
to the full command line (cli/main.py).

The full command line imports every verb's code (Redis, pydantic, the operations: about a second) to
build its parser. A swarm must not start with that in memory: its first fork server, and so every
worker, is a fork of this process (cli/swarm.py says why that matters), and `cogworker swarm` is
meant to be `cogworker-swarm` exactly. So its command line is recognised here first, importing
nothing but the supervisor's entry. `cogworker run` is recognised here too, and started without the
other verbs' imports (cli/run_fast.py): every start and restart of a worker waits for them otherwise.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from cogworker.cli import run_fast, swarm


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    found = swarm.recognise(args)
    if found is not None:
        return swarm.start(*found)
    if run_fast.recognise(args):
        return run_fast.main(args)
    from cogworker.cli.main import main as full_main

    return full_main(args)


if __name__ == "__main__":
    sys.exit(main())
