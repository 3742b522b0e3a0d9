"""How a process forked from a Python process ends: never by returning into its parent's code.

A fork continues in the caller's frames; a child that returned or raised would run the rest of the
supervisor (or fork server) as a second copy of it. Both forks of this package (the first fork server,
forkserver_client/first_forkserver.py; a worker, forkserver/fork.py) run their body through `exit_child`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from cogworker import exitcodes


def exit_child(body: Callable[[], int]) -> NoReturn:
    """Run `body`, then leave with its exit code through os._exit (no atexit handlers, no unwinding
    into the parent's code): FAILURE, with the traceback printed, when it raises. Output is flushed
    first, so nothing buffered is lost."""
    code = exitcodes.FAILURE
    try:
        code = body()
    except BaseException:
        import traceback  # only here: the supervisor imports this module before its fork server starts

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)
