"""systemd's notify protocol, spoken by the supervisor (DESIGN §6).

Our own sender rather than the sdnotify package: the protocol is one datagram of `KEY=value` lines to
the AF_UNIX socket named by `NOTIFY_SOCKET`, and what we need around it is policy the package doesn't
have: sends never block or raise into the event loop, and failures are logged instead of dropped.

Outside systemd (`NOTIFY_SOCKET` unset) every method is a no-op returning False, so the daemon runs the
same way from a terminal, a container or a test.
"""

from __future__ import annotations

import errno
import math
import os
import socket
import time
from collections.abc import Mapping, MutableMapping
from typing import Final

import structlog

log = structlog.get_logger("cogworker.notify")

# What systemd hands to the main process only. A child that inherited them could send READY=1 or
# WATCHDOG=1 on the swarm's behalf (NotifyAccess=main rejects those, but logs a warning per message),
# or, worse, keep the watchdog fed after the supervisor's loop has hung.
CHILD_ENV_SCRUB: Final = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


def scrub_child_env(env: MutableMapping[str, str]) -> None:
    """Remove systemd's notify variables from `env` (a dict for exec, or `os.environ` in a fresh child)."""
    for name in CHILD_ENV_SCRUB:
        env.pop(name, None)


def _one_line(text: str) -> str:
    # systemd splits a message on newlines, so a second line in STATUS= would be read as another
    # field (a job's error text could even forge READY=1). NUL ends the datagram's text for systemd.
    return " ".join(part.strip() for part in text.replace("\0", " ").splitlines() if part.strip())


def _address(value: str) -> str | None:
    if value.startswith("/"):
        return value
    if value.startswith("@") and len(value) > 1:
        # Linux abstract namespace: systemd writes a leading '@' for the NUL byte Python expects.
        return "\0" + value[1:]
    return None


class Notifier:
    """Sends notify messages to systemd over one reusable, non-blocking datagram socket.

    Built once by the supervisor from its own environment, before that environment is scrubbed for
    children. Not thread-safe, by design: only the supervisor's single event loop thread uses it.
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        # Read everything now: the supervisor scrubs os.environ for its children afterwards.
        self._raw_address = env.get("NOTIFY_SOCKET", "")
        self._address = _address(self._raw_address) if self._raw_address else None
        self._watchdog_usec = env.get("WATCHDOG_USEC", "")
        self._watchdog_pid = env.get("WATCHDOG_PID", "")
        self._sock: socket.socket | None = None
        # errnos already logged since the last successful send: a dead socket would otherwise log
        # on every watchdog tick, burying the one line that says what went wrong.
        self._logged_errnos: set[int] = set()

    @property
    def enabled(self) -> bool:
        """True when systemd asked for notifications (NOTIFY_SOCKET was set)."""
        return bool(self._raw_address)

    def ready(self, status: str | None = None) -> bool:
        """Startup (or a restart) finished: every slot has reported ready."""
        return self._send_fields("READY=1", status)

    def status(self, text: str) -> bool:
        """The one-line summary `systemctl status` shows."""
        return self._send_fields(None, text)

    def watchdog(self) -> bool:
        """Keep-alive; sent from the event loop itself so a hung loop is what stops it."""
        return self.send("WATCHDOG=1")

    def reloading(self) -> bool:
        """A restart of the children began; `ready()` ends it.

        MONOTONIC_USEC lets systemd (253+, Type=notify-reload) tell this reload from an older one;
        systemd 252 ignores the field, so sending it costs nothing.
        """
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.send(f"RELOADING=1\nMONOTONIC_USEC={usec}")

    def stopping(self) -> bool:
        """A graceful stop began."""
        return self.send("STOPPING=1")

    def extend_timeout(self, seconds: float) -> bool:
        """Ask for `seconds` more before systemd's start/stop timeout fires (sent while draining)."""
        if not math.isfinite(seconds):
            raise ValueError(f"extend_timeout needs a finite number of seconds, not {seconds!r}")
        # A deadline computed as `deadline - now` can be just past when the loop runs late; that is
        # "no more time", not a reason to kill the event loop.
        usec = max(0, int(seconds * 1_000_000))
        return self.send(f"EXTEND_TIMEOUT_USEC={usec}")

    def watchdog_interval_s(self) -> float | None:
        """Seconds between WATCHDOG=1 pings (half of WatchdogSec=), or None when no watchdog is set.

        None too when WATCHDOG_PID names another process: the variables were inherited, and the
        watchdog belongs to that process, not to us (sd_watchdog_enabled() has the same rule).
        """
        if not self.enabled or not self._watchdog_usec:
            return None
        try:
            usec = int(self._watchdog_usec)
        except ValueError:
            return None
        if usec <= 0:
            return None
        if self._watchdog_pid:
            try:
                pid = int(self._watchdog_pid)
            except ValueError:
                return None
            if pid != os.getpid():
                return None
        return usec / 2 / 1_000_000

    def send(self, message: str) -> bool:
        """Send one raw message (`KEY=value` lines). True when the datagram was handed to the kernel."""
        if not self._raw_address:
            return False
        if self._address is None:
            self._log_failure(errno.EAFNOSUPPORT, "NOTIFY_SOCKET is neither a path nor an @abstract name")
            return False
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                # Never wait on systemd: if its queue is full, the loop must go on reaping and
                # relaying signals. A dropped WATCHDOG=1 is then what the watchdog should see.
                self._sock.setblocking(False)
            self._sock.sendto(message.encode("utf-8"), self._address)
        except OSError as exc:
            self._log_failure(exc.errno or 0, exc.strerror or str(exc))
            return False
        if self._logged_errnos:
            log.info("systemd notify works again", socket=self._raw_address)
            self._logged_errnos.clear()
        return True

    def close(self) -> None:
        """Close the socket (e.g. in a forked child, which must not talk to systemd)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _send_fields(self, first: str | None, status: str | None) -> bool:
        fields = [first] if first else []
        if status is not None:
            fields.append(f"STATUS={_one_line(status)}")
        return self.send("\n".join(fields))

    def _log_failure(self, code: int, reason: str) -> None:
        if code in self._logged_errnos:
            return
        self._logged_errnos.add(code)
        log.error(
            "systemd notify failed; later failures with the same error are not logged",
            socket=self._raw_address,
            errno=errno.errorcode.get(code, str(code)),
            reason=reason,
        )
