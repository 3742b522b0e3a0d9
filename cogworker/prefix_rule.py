"""The rule for COGWORKER_KEY_PREFIX, the start of every key and channel name (store/keys.py).

Checked at start like every setting, so a prefix that would misbehave stops the command with exit 78
instead of writing keys an operator can't address or a cluster would spread over slots.
"""

from __future__ import annotations


def check_key_prefix(value: str) -> str:
    """`value` if it is a usable prefix, else ValueError saying what is wrong."""
    if not value:
        raise ValueError("must not be empty (the default is cogworker:)")
    if any(c.isspace() or not c.isprintable() for c in value):
        # Legal in a Redis key, but it breaks every operator's redis-cli line, an ACL key pattern
        # (~prefix*) and the log lines that quote keys.
        raise ValueError("must hold no whitespace or control characters")
    opening, closing = value.find("{"), value.find("}")
    if opening != -1 or closing != -1:
        # Redis Cluster hashes only the text between the first { and the first } after it. A lone
        # brace, a second tag or {} with nothing inside would not pin the deployment to one slot as
        # its writer meant, and cluster mode needs every key of a script in one slot.
        if value.count("{") != 1 or value.count("}") != 1 or not opening < closing:
            raise ValueError("has an unbalanced hash tag: give one {tag} (e.g. {myapp}:) or none")
        if closing == opening + 1:
            raise ValueError("has an empty hash tag {}: Redis ignores it, so keys would spread over slots")
    return value
