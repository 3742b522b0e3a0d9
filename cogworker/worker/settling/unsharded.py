"""Jobs the sharded layout can't run: chain steps with a group to come.

Their settle must create the group's batch in the home slot in the same step as the job's ack in its
partition's slot, and the cross-slot protocol for that is not built
(`shards.refuse`): pushes of such jobs are refused. One pushed anyway (by a client of an older version,
or written by hand) is not run: it ends in its partition's dead set, counted failed, with a death
notice and an error naming the feature, rather than run with its batch or chain silently skipped.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from cogworker import codec
from cogworker.api import retry
from cogworker.api.retry import Filing
from cogworker.worker.fetching.fetch import Work

log = structlog.get_logger("cogworker.job")

ERROR_CLASS = "cogworker.NotShardedYet"
# Payload field -> the feature it belongs to.
FEATURES = {"chain": "chain groups"}
_MARKS = tuple(f'"{name}"' for name in FEATURES)


def _refused(name: str, value: object) -> bool:
    """A chain step is run unless a group is still to come in its chain (chain_sharded.py can't push
    one): `chain()` refuses such a chain, so only a client that didn't reaches here."""
    if name != "chain":
        return True
    rest = value.get("next") if isinstance(value, dict) else None
    return isinstance(rest, list) and any(isinstance(s, dict) and "group" in s for s in rest)


def refusal(raw: str) -> Filing | None:
    """The dead filing for a payload carrying a refused feature; None for any other (the common case
    costs three substring tests)."""
    if not any(mark in raw for mark in _MARKS):
        return None
    job = codec.loads_dict(raw)
    if job is None:
        return None
    used = [feature for name, feature in FEATURES.items() if name in job and _refused(name, job[name])]
    if not used:
        return None
    reason = (
        f"{' and '.join(used)} can't be used with COGWORKER_CLUSTER_SHARDING=queues yet: this job was not "
        "run (pushed by a client that did not refuse it); push it again without them, or run it in "
        "the one-slot layout"
    )
    return retry.not_here(job, ERROR_CLASS, reason)


def end_refused(
    works: list[Work], file: Callable[[str, Filing, str], bool], failed: Callable[[], None]
) -> list[Work]:
    """File each refused job of `works` in dead (`file`: the settler's) and count it (`failed`);
    returns the jobs to run."""
    kept: list[Work] = []
    for work in works:
        filing = refusal(work.raw)
        if filing is None:
            kept.append(work)
            continue
        log.error(
            "job_refused_in_sharded_layout",
            jid=filing.payload.get("jid"),
            queue=work.queue,
            error=filing.payload["error_message"],
        )
        file(work.raw, filing, work.run_id)
        failed()
    return kept
