"""`cogworker deploy print-*`: the systemd deployment kit shipped in the package, on stdout.

It needs no settings and no Redis: it is what an operator runs before either exists, e.g.
`cogworker deploy print-unit > /etc/systemd/system/cogworker@.service`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from cogworker import deploy_kit, exitcodes

WHAT = {
    "print-unit": ("unit", "the systemd template unit, cogworker@.service"),
    "print-target": ("target", "cogworker.target, which starts and stops every enabled instance"),
    "print-env": ("env", "the example instance env file, every COGWORKER_* setting with its default"),
    "print-install": ("install", "install.sh: user, virtualenv, env files and units in one go (run as root)"),
}


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "deploy",
        help="print the systemd unit, target, example env file or install script shipped in the package",
        description="Print a file of the systemd deployment kit shipped in the package. Needs no settings "
        "and no Redis.",
    )
    what = parser.add_subparsers(dest="file", required=True)
    for name, (_, help_text) in WHAT.items():
        what.add_parser(name, help=help_text, description=f"Print {help_text}.")


def print_file(args: argparse.Namespace) -> int:
    try:
        sys.stdout.write(deploy_kit.read(deploy_kit.FILES[WHAT[args.file][0]]))
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`cogworker deploy print-unit | head`): no traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return exitcodes.FAILURE
    return exitcodes.OK
