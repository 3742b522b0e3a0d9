#!/usr/bin/env python
"""The test project's manage.py. A project keeps it beside its package; the tests run this one with
tests/apps on PYTHONPATH, or copy it next to a copy of django_shop (a fresh virtualenv's project)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_shop.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
