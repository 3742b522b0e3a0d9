"""The shipped systemd unit files, and the drop-in that lets them run this checkout's interpreter."""

from __future__ import annotations

import sys

from tests.support.paths import ROOT

SERVICE = ROOT / "cogworker" / "deploy_kit" / "cogworker@.service"
TARGET = ROOT / "cogworker" / "deploy_kit" / "cogworker.target"


def expose_interpreter() -> str:
    """Drop-in lines that make this interpreter, its virtualenv and this checkout visible to the service.

    ProtectHome=yes hides /root and /home, where a pyenv interpreter like this one lives, and
    PrivateTmp=yes hides a checkout under /tmp (where CI may clone it); the unit's own comment gives
    the remedy for an app in such a place, and this is it.
    """
    homes = ("/root/", "/home/", "/run/user/")
    hidden = (*homes, "/tmp/", "/var/tmp/")
    checkout = str(ROOT)
    paths = sorted({p for p in (sys.base_prefix, sys.prefix, checkout) if p.startswith(hidden)})
    lines = "".join(f"BindReadOnlyPaths={p}\n" for p in paths)
    if any(p.startswith(homes) for p in paths):
        lines = "ProtectHome=tmpfs\n" + lines
    return lines
