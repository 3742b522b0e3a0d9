"""The keys of Sidekiq's own that the Sidekiq mode (COGWORKER_SIDEKIQ_COMPAT) writes or reads beside the
shared families of store/keys.py: each process's presence as Sidekiq keeps it.

Sidekiq names a process's keys by its identity alone, under the shared start (bare, or a Sidekiq 6
namespace): a hash `<identity>` (info, busy, beat, quiet, rss), a hash of the jobs running on it
(`<identity>:workers` in Sidekiq 6, `<identity>:work` in 7) and a list of signals sent to it
(`<identity>-signals`). Sidekiq drops from the shared `processes` set every member with no `<identity>`
hash, so a cogworker process in the mode keeps one.
"""

from __future__ import annotations

from cogworker.store import keys


def enabled() -> bool:
    """Whether the Sidekiq mode is on in this process."""
    return bool(keys.SIDEKIQ)


def presence(identity: str) -> str:
    return keys.SHARED_PREFIX + identity


def busy_jobs(identity: str) -> str:
    suffix = ":workers" if keys.SIDEKIQ == "6" else ":work"
    return f"{keys.SHARED_PREFIX}{identity}{suffix}"


def signals(identity: str) -> str:
    return f"{keys.SHARED_PREFIX}{identity}-signals"
