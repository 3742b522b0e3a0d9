"""The one rule for queue names, shared by every way to push (`@job(queue=...)`, `.set(queue=...)`,
`push_bulk(queue=...)`, `cogworker enqueue --queue`) and by COGWORKER_QUEUES, so a job can't be pushed
to a queue no worker can be configured to read.

COGWORKER_QUEUES is `a:3,b:1`: a `,` or `:` in a name would split it, and whitespace around a name is
stripped. Control characters are refused too: they would garble log lines, `cogworker queues` and
metrics labels, and nobody names a queue with them on purpose.
"""

from __future__ import annotations

QUEUE_NAME_RULE = "a non-empty name without whitespace, ':', ',' or control characters"


def is_queue_name(name: object) -> bool:
    return (
        isinstance(name, str)
        and bool(name)
        and all(c.isprintable() and not c.isspace() and c not in ":," for c in name)
    )
