"""What the Web UI's page tests send (tests/unit/web/): the header a browser adds to a form posted from
the UI's own pages, and markup an attacker could store in a job's fields, which every page must show
escaped."""

from __future__ import annotations

# The UI refuses a POST that is not same-origin (cogworker/web/security.py).
SAME_ORIGIN = {"Sec-Fetch-Site": "same-origin"}
SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'
