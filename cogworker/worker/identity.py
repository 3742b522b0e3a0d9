"""Process identities: `host:pid:nonce`, unique across restarts and hosts."""

from __future__ import annotations

import os
import secrets
import socket


def make_identity(pid: int | None = None, nonce: str | None = None) -> str:
    """The supervisor picks the nonce before forking, so it knows a child's identity even if the
    child dies before saying anything."""
    return f"{socket.gethostname()}:{pid if pid is not None else os.getpid()}:{nonce or secrets.token_hex(4)}"
