"""Credentials out of everything shown: error messages, logs, command output, process titles.

Deliberately free of imports beyond the standard library, so the supervisor (which loads neither
pydantic nor the Redis client) can use it too.
"""

from __future__ import annotations

import re

# A password may also ride in the query string (redis-py reads `?password=`).
_QUERY_SECRET = re.compile(r"(?i)([?&](?:password|passwd|pass|pwd|auth|token|secret)=)[^&#]*")


def safe_url(url: str) -> str:
    """`url` with its password (or a lone user part, often a password) and any password= query
    value replaced by `***`.

    This works on the text, not on a parsed URL: a password holding `/`, `?` or `#` ends a parser's
    idea of the authority early and leaves the rest of the password in the path, where a parser-based
    redaction would show it. So everything between `scheme://` and the last `@` counts as
    credentials; a text that isn't a URL at all is treated the same way."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    credentials, at, tail = rest.rpartition("@")
    if at:
        user, colon, _password = credentials.partition(":")
        rest = f"{user}:***@{tail}" if colon else f"***@{tail}"
    return scheme + sep + _QUERY_SECRET.sub(r"\1***", rest)
