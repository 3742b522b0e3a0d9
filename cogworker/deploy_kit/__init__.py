"""The files a systemd deployment needs, shipped in the package so an installed cogworker has them:
the template unit (cogworker@.service), the target that groups its instances (cogworker.target), the
example instance env file (cogworker.env.example) and install.sh, which installs all three.
`cogworker deploy print-*` prints them; install.sh takes them from beside itself."""

from __future__ import annotations

from importlib import resources

FILES = {
    "unit": "cogworker@.service",
    "target": "cogworker.target",
    "env": "cogworker.env.example",
    "install": "install.sh",
}


def read(name: str) -> str:
    """The text of the kit's file `name` (one of FILES' values)."""
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
