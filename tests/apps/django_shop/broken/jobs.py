"""Fails to import: autodiscovery must report it, naming this module, not skip it."""

from __future__ import annotations

import django_shop.no_such_module  # noqa: F401
