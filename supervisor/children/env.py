"""What a process the supervisor starts must not inherit from it: systemd's notify variables.

Apart from the notifier (integrations/notify.py) because the supervisor starts its fork server before
it imports anything heavy (issue 18: start-up), and the notifier imports sdnotify and structlog.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Final

# Only the supervisor speaks to systemd. A child that inherited NOTIFY_SOCKET could send READY=1 or
# WATCHDOG=1 on the swarm's behalf (NotifyAccess=main rejects those, but logs a warning per message),
# or, worse, keep the watchdog fed after the supervisor's loop has hung.
CHILD_ENV_SCRUB: Final = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


def scrub_child_env(env: MutableMapping[str, str]) -> None:
    """Remove systemd's notify variables from `env` (a dict for exec, or `os.environ` in a fresh child)."""
    for name in CHILD_ENV_SCRUB:
        env.pop(name, None)
