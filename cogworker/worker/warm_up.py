"""What a worker would otherwise load between its start and its first fetch, loaded ahead of time.

A swarm's fork server imports the worker code while the settings are checked in another process
(supervisor/forkserver/settings_check.py), and `cogworker run` does the same (cli/run_fast.py); the
check takes longer, so both then wait. That wait is free time for what every worker would otherwise
do itself after the fork, one after the other, before its first job: done here once, it is
inherited by every worker forked after it.
"""

from __future__ import annotations


def warm_up() -> None:
    # The socket module encodes each host name as IDNA at the first connect (stringprep, unicodedata).
    import encodings.idna  # noqa: F401

    from cogworker.store import scripts
    from cogworker.store.connection import driver_options

    scripts.load_all()  # 16 Lua files read through importlib.resources, and their preludes assembled
    driver_options()  # redis-py's version, which it would read from the package metadata per connection
