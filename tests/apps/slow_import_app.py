"""An app whose import takes a while (like a big Django app), and says when it has begun."""

from __future__ import annotations

import os
import time
from pathlib import Path

marker = os.environ.get("SLOW_IMPORT_MARKER")
if marker:
    Path(marker).write_text(str(os.getpid()))
time.sleep(float(os.environ.get("SLOW_IMPORT_SECONDS", "2")))  # the slow import being simulated

import demo_jobs  # noqa: E402,F401  (its jobs are this app's jobs)
