"""A process of the swarm dies with its parent (Linux's PR_SET_PDEATHSIG), so a SIGKILLed supervisor
leaves none of them running: the fork server, the process that checks its settings, every worker."""

from __future__ import annotations

import contextlib
import ctypes
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """SIGKILL this process when the parent it has now dies. Elsewhere than Linux it does nothing:
    each caller's getppid() check after it is the portable backstop."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
