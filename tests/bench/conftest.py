"""The benchmark harness is not a test suite: pytest must never import these files.

They need the peers (dramatiq, rq, celery) that only `.bench-venv/` has, so collecting them from the
project's `.venv/` would fail on import.
"""

collect_ignore_glob = ["*"]
