"""For job modules whose runs are recorded in a file outside Redis (a failover or a partition may lose
what Redis holds): one line appended in one write(), with O_APPEND, so lines from several workers
never interleave (atomic for lines this short)."""

from __future__ import annotations

import os


def append_line(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{text}\n".encode())
    finally:
        os.close(fd)
