"""Every key name store/keys.py builds, for the tests of where names start (the prefix, the Sidekiq mode)."""

from __future__ import annotations

from cogworker.store import keys

# Every function of keys.py that builds a name, with an argument.
BUILDERS = {
    "queue": ("q",),
    "suspects": ("q",),
    "in_progress": ("host:1:2",),
    "process": ("host:1:2",),
    "work": ("host:1:2",),
    "signals": ("host:1:2",),
    "orphanings": ("jid1",),
    "orphanings_raw": ("0" * 40,),
    "handed_over": ("digest",),
    "stat_processed_day": ("2026-01-01",),
    "stat_failed_day": ("2026-01-01",),
    "stat": ("expired",),
    "stat_day": ("expired", "2026-01-01"),
    "unique": ("digest",),
    "periodic_slot": ("entry", 42),
    "periodic_running": ("entry",),
    "periodic_runs": ("entry",),
    "status": ("jid1",),
    "result": ("jid1",),
    "result_channel": ("jid1",),
    "chain": ("cid1",),
    "quarantine": ("what",),
    "batch": ("bid1",),
    "batch_pending": ("bid1",),
    "batch_failures": ("bid1",),
    "limiter": ("concurrent", "name1"),
    "pushed": ("jid1",),
    "cancelled": ("jid1",),
    "metrics_flushed": ("host:1:2",),
}


def every_name() -> list[str]:
    """Every key, key prefix and channel name keys.py holds right now."""
    names = [
        value
        for name, value in vars(keys).items()
        # LIMITED is an outcome's name, not a key (keys.stat(LIMITED) is one, and is listed); SIDEKIQ is a
        # version, and SHARED_PREFIX the start of names listed here (test_sidekiq_keys.py).
        if name.isupper()
        and name not in {"DEFAULT_PREFIX", "LIMITED", "SIDEKIQ", "SHARED_PREFIX"}
        and isinstance(value, str)
    ]
    names += [*keys.EXPECTED_TYPES, *keys.EXPECTED_PREFIX_TYPES, *keys.job_sets().values()]
    names += [getattr(keys, builder)(*args) for builder, args in BUILDERS.items()]
    return names
