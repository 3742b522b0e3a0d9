"""systemd's notify protocol, spoken by the supervisor (what it sends, and when, is in systemd.py).

The sdnotify package is the transport: it connects a datagram socket to the address in
`NOTIFY_SOCKET` (a path, or `@name` in the abstract namespace) and sends one message per datagram.
What sdnotify doesn't do is the policy, which is ours: a send never blocks the event loop (the socket
is non-blocking: a full queue drops the message) and never raises into it; each kind of failure is
logged once, and its end once; a broken connection is made again at the next send. Children never
inherit `NOTIFY_SOCKET` or `WATCHDOG_*` (`scrub_child_env`, in supervisor/children/env.py).

Outside systemd (`NOTIFY_SOCKET` unset) every method is a no-op returning False, so the daemon runs the
same way from a terminal, a container or a test.
"""

from __future__ import annotations

import errno
import math
import os
import time

import sdnotify
import structlog

from supervisor.children.env import CHILD_ENV_SCRUB, scrub_child_env

log = structlog.get_logger("cogworker.notify")

__all__ = ["CHILD_ENV_SCRUB", "Notifier", "scrub_child_env"]


def _one_line(text: str) -> str:
    # systemd splits a message on newlines, so a second line in STATUS= would be read as another
    # field (a job's error text could even forge READY=1). NUL ends the datagram's text for systemd.
    return " ".join(part.strip() for part in text.replace("\0", " ").splitlines() if part.strip())


def _usable(value: str) -> bool:
    # A path, or Linux's abstract namespace ('@' stands for the leading NUL; sdnotify converts it).
    return value.startswith("/") or (value.startswith("@") and len(value) > 1)


class Notifier:
    """Sends notify messages to systemd through one reusable, non-blocking sdnotify connection.

    Reads `NOTIFY_SOCKET` and `WATCHDOG_*` from the environment when built. sdnotify reads
    `NOTIFY_SOCKET` itself whenever it connects, so the supervisor keeps it in its own environment
    (only its children's are scrubbed). Not thread-safe, by design: only the supervisor's single
    event loop thread uses it.
    """

    def __init__(self) -> None:
        self._raw_address = os.environ.get("NOTIFY_SOCKET", "")
        self._watchdog_usec = os.environ.get("WATCHDOG_USEC", "")
        self._watchdog_pid = os.environ.get("WATCHDOG_PID", "")
        self._transport: sdnotify.SystemdNotifier | None = None
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
        if not _usable(self._raw_address):
            self._log_failure(errno.EAFNOSUPPORT, "NOTIFY_SOCKET is neither a path nor an @abstract name")
            return False
        try:
            transport = self._transport or self._connect()
            # sdnotify encodes text as Latin-1; decoding our UTF-8 bytes as Latin-1 first makes it
            # send exactly those bytes (systemd reads UTF-8), whatever a STATUS= text contains.
            transport.notify(message.encode("utf-8").decode("latin-1"))
        except OSError as exc:
            if exc.errno != errno.EAGAIN:
                # Refused or gone: the next send connects afresh. A full queue (EAGAIN) is systemd
                # being busy, not a broken connection.
                self.close()
            self._log_failure(exc.errno or 0, exc.strerror or str(exc))
            return False
        except Exception as exc:
            # Not a socket error: something sdnotify itself raised. Still not the event loop's problem.
            self.close()
            self._log_failure(0, f"{type(exc).__name__}: {exc}")
            return False
        if self._logged_errnos:
            log.info("systemd notify works again", socket=self._raw_address)
            self._logged_errnos.clear()
        return True

    def close(self) -> None:
        """Close the connection; the next send opens a new one."""
        if self._transport is not None:
            self._transport.socket.close()
            self._transport = None

    def _connect(self) -> sdnotify.SystemdNotifier:
        if os.environ.get("NOTIFY_SOCKET") != self._raw_address:
            raise OSError(errno.EDESTADDRREQ, "NOTIFY_SOCKET was changed or removed from our environment")
        # debug=True: sdnotify raises instead of swallowing errors, so they reach our policy above.
        transport = sdnotify.SystemdNotifier(debug=True)
        # Never wait on systemd: if its queue is full, the loop must go on reaping and relaying
        # signals. A dropped WATCHDOG=1 is then what the watchdog should see.
        transport.socket.setblocking(False)
        self._transport = transport
        return transport

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
