"""Where things are, for tests at any depth under tests/."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
ROOT = TESTS.parent
# Job modules the tests' child processes import; conftest.py puts this folder on PYTHONPATH.
APP_DIR = TESTS / "apps"
