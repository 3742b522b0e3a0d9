"""The fork server's entry point, run by the supervisor as `python -m supervisor.forkserver.main`, or
called in a fork of the supervisor for a swarm's first fork server
(supervisor/forkserver_client/first_forkserver.py).

The collector is off while the fork server imports. Those imports (redis-py, structlog, the worker
code, and the app with COGWORKER_PRELOAD) make 80,000 to 90,000 tracked objects that live as
long as the process, and every full collection the allocator triggers on the way walks all of them
again: 13 to 25 ms of 150 to 190, on the way to every swarm's first job and every restart's. None of
it is garbage worth finding then. boot.py freezes what is loaded, after one collection if an app was
preloaded, and only then turns the collector back on, so the workers forked after it run with it on.
"""

from __future__ import annotations

import gc
import sys


def main() -> int:
    gc.disable()
    from supervisor.forkserver.settings_check import SettingsCheck

    # Before the imports below, so the settings are checked beside them (settings_check.py says why).
    check = SettingsCheck.start()
    from supervisor.forkserver.boot import boot  # here, so the imports run with the collector off

    return boot(check)


if __name__ == "__main__":
    sys.exit(main())
