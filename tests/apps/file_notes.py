"""The bodies of the jobs that cluster_jobs and tls_jobs both define: each run is recorded as a line
in a file outside Redis (tests/apps/line_sink.py), `<what> <pid>`, a count that neither a failover nor
an ACL can touch. The job modules keep their own decorators (their retry policies differ), so a job's
name stays its module's."""

from __future__ import annotations

import os
import signal

from line_sink import append_line


def note(path: str, what: str) -> None:
    append_line(path, f"{what} {os.getpid()}")


def _first_time(marker: str, text: str) -> bool:
    """True on the first call for `marker` (a file, created with `text`), False on every later one."""
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    try:
        os.write(fd, f"{text}\n".encode())
    finally:
        os.close(fd)
    return True


def fail_first(path: str, tag: str) -> None:
    """Raises on its first run (a marker file says it ran once); the retry records `retried-<tag>`."""
    if _first_time(f"{path}.{tag}.tried", "tried"):
        raise RuntimeError(f"first try of {tag} fails")
    note(path, f"retried-{tag}")


def die_first(path: str, tag: str) -> None:
    """SIGKILLs its own process on its first run; the run after recovery records `recovered-<tag>`."""
    if _first_time(f"{path}.{tag}.died", str(os.getpid())):
        os.kill(os.getpid(), signal.SIGKILL)
    note(path, f"recovered-{tag}")
