"""Chains: `cogworker.chain(a.s(1), b.s(2), c.s())` runs each step after the previous one succeeded.

`job.s(*args, **kwargs)` (or `job.set(...).s(...)`) makes a `Signature`: a job, its arguments and
options, not pushed. `chain(...)` checks every step, writes the chain's record (`chain:<cid>`, a
hash: the steps with the jids they will run under, and progress), then pushes the first step at
once, through the client middleware like any push, and returns a `Chain` (its id, every step's jid).

Every step's payload carries a `chain` field: the chain id, its index, the steps still to come and
whether results are passed. Only such a payload takes the chain path in a worker
(worker/settling/chain_step.py): its success is acknowledged by `chain_ack.lua`, which takes the job off the
in-progress list and, only if it was still there, pushes the next step and records the progress,
in one atomic step. A step that runs twice (its process died before the ack) therefore pushes its
successor once. A step that goes to dead stops the chain; `chain_status(cid)` reports it.

With `pass_results=True` each step after the first gets the previous step's return value as its
first positional argument (as Celery's chains do); the steps then keep their results
(`result_ttl`, a day unless a step or `result_ttl=` says otherwise), which is where the value is
taken from at the ack. Later steps are pushed by a worker, not through the client middleware, so
options that need it at push (`unique`, `unique_for`, `expires_in`) are refused on them.

`cogworker.group(a.s(1), b.s(2))` as a step runs its members in parallel, as one batch
(api/chain_group.py): the ack that pushes the group creates the batch and pushes its members in the
same atomic step, and the batch's `on_success` callback continues the chain. In the sharded layout the
ack writes the group into its outbox entry instead (api/chain_group_outbox.py).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any

from cogworker import codec
from cogworker.api import chain_group, client, features
from cogworker.api.chain_group import FIELD
from cogworker.api.payload import check_arguments, new_jid
from cogworker.api.push_outcome import may_be_queued
from cogworker.api.retry_filters import WORKER_SIDE
from cogworker.store import keys, shards
from cogworker.store.connection import is_unavailable

# How long a chain's record is kept after its last change (a step done, the chain's end).
DEFAULT_TTL_S = 7 * 24 * 3600.0
# The results kept by steps of a chain that passes results, unless a step says otherwise.
DEFAULT_RESULT_TTL_S = 24 * 3600.0
MAX_STEPS = 1000
# Options applied by the client middleware at push: a later step is pushed by a worker's ack script.
FIRST_STEP_ONLY = ("unique", "unique_for", "expires_in")


@dataclass(frozen=True, slots=True)
class Signature:
    """A job with its arguments and options, not pushed: one step of a chain (`job.s(...)` makes one).

    Attributes:
        name: The job's registered name.
        queue: The queue it is pushed to.
        args: Its positional arguments, checked (and converted for typed parameters) already.
        kwargs: Its keyword arguments.
        options: Its options (`job.set(...)`'s, then `Signature.set`'s).
    """

    name: str
    queue: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)
    # The job has typed parameters (api/typed_args.py): its arguments were converted by position.
    typed: bool = False

    def set(self, **options: Any) -> Signature:
        """Return this step with some options changed, as `JobFunction.set` does for a push.

        Args:
            **options: The options `JobFunction.set` accepts. In a chain, `unique`, `unique_for` and
                `expires_in` apply to the first step only.

        Returns:
            A new Signature; this one is unchanged.

        Raises:
            TypeError: An option is unknown, only `@job` takes it, or its value is not valid.
        """
        features.check_set_options(options)
        queue = str(options.get("queue") or self.queue)
        return Signature(self.name, queue, self.args, self.kwargs, {**self.options, **options}, self.typed)


def signature(
    name: str,
    default_queue: str,
    options: dict[str, Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    typed: bool = False,
) -> Signature:
    """What `job.s(...)` returns; the arguments are checked now, as a push would."""
    check_arguments(args, kwargs)
    queue = str(options.get("queue") or default_queue)
    return Signature(name, queue, tuple(args), dict(kwargs), dict(options), typed)


@dataclass(frozen=True, slots=True)
class Group:
    """Steps run in parallel as one step of a chain (`cogworker.group(...)` makes one), as a batch.

    Attributes:
        members: The steps run in parallel.
    """

    members: tuple[Signature, ...]


def group(*members: Signature) -> Group:
    """Make a chain step whose members run in parallel, as one batch.

    The next step runs once every member succeeded (with `pass_results`, given the list of their
    results, in this order). A member that goes to dead stops the chain.

    Args:
        *members: The steps (`job.s(...)`), at most 1,000.

    Returns:
        A Group, for `cogworker.chain(...)`.

    Raises:
        TypeError: No member, too many, one that is not a Signature, or one with `unique`,
            `unique_for` or `expires_in` (a worker's script pushes members, not the client).

    Example:
        >>> cogworker.chain(fetch.s(url), cogworker.group(thumb.s(), ocr.s()), publish.s())  # doctest: +SKIP
    """
    if not members:
        raise TypeError("group() needs at least one member")
    if len(members) > MAX_STEPS:
        raise TypeError(f"group() takes at most {MAX_STEPS} members, not {len(members)}")
    for index, member in enumerate(members):
        if not isinstance(member, Signature):
            raise TypeError(
                f"group member {index} must be a signature (job.s(...)), not {type(member).__name__}"
            )
        late = sorted(o for o in FIRST_STEP_ONLY if member.options.get(o) is not None)
        if late:
            raise TypeError(
                f"group member {index} ({member.name}): {', '.join(late)} can't apply to a group's "
                "members (a worker's script pushes them, not the client)"
            )
    return Group(tuple(members))


@dataclass(frozen=True, slots=True)
class Chain:
    """A chain that was pushed: what `cogworker.chain(...)` returns.

    Attributes:
        id: The chain's id, for `cogworker.chain_status`.
        jids: The jid each step runs under, in order (a group's: the id of the batch its members
            run as), so `cogworker.result(chain.jids[-1])` waits for the last step.
    """

    id: str
    jids: tuple[str, ...]

    @property
    def first_jid(self) -> str:
        """The jid the first step runs under (for a group first: its batch's id)."""
        return self.jids[0]


def _step_spec(sig: Signature, jid: str, pass_results: bool, result_ttl: float) -> dict[str, Any]:
    # As a push does (client.build_job): retry filters are code, read by the worker from the job.
    options = {
        k: v for k, v in sig.options.items() if k != "queue" and k not in WORKER_SIDE and v is not None
    }
    # Tracked, so chain_status can tell a step queued, running, retrying or dead.
    options["status"] = True
    default_ttl = client.settings().result_ttl_s
    if default_ttl is not None and "result_ttl" not in options:
        options["result_ttl"] = (
            default_ttl  # COGWORKER_RESULT_TTL_S, applied at push as client.build_job does
        )
    if pass_results:
        kept = options.get("result_ttl", result_ttl)
        if not kept:
            raise TypeError(
                f"{sig.name}: pass_results=True needs its steps to keep their result (result_ttl)"
            )
        options["result_ttl"] = kept
    return {"class": sig.name, "queue": sig.queue, "args": list(sig.args), "kwargs": sig.kwargs,
            "jid": jid, "options": options}  # fmt: skip


def _check_step(index: int, step: Signature, pass_results: bool, *, late_ok: bool) -> None:
    if pass_results and index > 0 and step.typed and step.args:
        raise TypeError(
            f"chain step {index} ({step.name}) has typed parameters: with pass_results=True pass its "
            "arguments by keyword (the previous result takes the first position)"
        )
    late = sorted(o for o in FIRST_STEP_ONLY if index > 0 and step.options.get(o) is not None)
    if late and not late_ok:  # a group's members were refused them by group()
        raise TypeError(f"chain step {index} ({step.name}): {', '.join(late)} only apply to the first step")


def chain(
    *steps: Signature | Group,
    pass_results: bool = False,
    result_ttl: float = DEFAULT_RESULT_TTL_S,
    ttl_s: float = DEFAULT_TTL_S,
) -> Chain | None:
    """Push a chain: the first step now, each next one when the previous one succeeded.

    A step is pushed once, by the worker that acknowledges the previous one. A step that goes to
    dead stops the chain; `chain_status` reports it.

    Args:
        *steps: The steps, each a Signature (`job.s(...)`) or a Group, at most 1,000.
        pass_results: Give each step after the first the previous step's return value as its first
            positional argument (a group's: the list of its members' results).
        result_ttl: With `pass_results`, how long each step keeps its result, in seconds, unless the
            step says otherwise. Default: a day.
        ttl_s: How long the chain's record is kept after its last change, in seconds. Default: a week.

    Returns:
        The Chain (its id, every step's jid), or None when a client middleware stopped the first
        step's push (nothing of the chain is left in Redis then).

    Raises:
        TypeError: No step or too many, a step that is not a Signature or Group, `unique`,
            `unique_for` or `expires_in` on a later step, a bad `ttl_s`/`result_ttl`, or a call
            inside a batch's block (a chain can't be a batch member).
        RuntimeError: A testing mode (fake, inline) is on: chains need Redis.
        PushOutcomeUnknown: As for `JobFunction.perform_async`; the chain's record is kept.

    Example:
        >>> chain = cogworker.chain(fetch.s(url), parse.s(), store.s(), pass_results=True)  # doctest: +SKIP
        >>> cogworker.result(chain.jids[-1], timeout=60)  # doctest: +SKIP
    """
    if not steps:
        raise TypeError("chain() needs at least one step")
    if len(steps) > MAX_STEPS:
        raise TypeError(f"chain() takes at most {MAX_STEPS} steps, not {len(steps)}")
    for index, step in enumerate(steps):
        if isinstance(step, Group):
            for member in step.members:
                _check_step(index, member, pass_results, late_ok=True)
            continue
        if not isinstance(step, Signature):
            raise TypeError(
                f"chain step {index} must be a signature (job.s(...)) or a group, not {type(step).__name__}"
            )
        _check_step(index, step, pass_results, late_ok=False)
    for name, value in (("ttl_s", ttl_s), ("result_ttl", result_ttl)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 10 * 365 * 86400:
            raise TypeError(f"chain() {name} must be seconds above 0, not {value!r}")
    if not client.redis_in_use():
        raise RuntimeError("chains need Redis: a testing mode (fake, inline) can't run them")
    batches = sys.modules.get("cogworker.api.batch")  # loaded by whoever opened a batch
    if batches is not None and batches._open.get() is not None:
        # Its first step would join the batch, but a chain step is acknowledged by chain_ack.lua,
        # which doesn't count batch members: the batch would never complete.
        raise TypeError("chain() inside a batch's block: a chain can't be a batch member (yet)")
    features.ensure_installed()
    cid = new_jid()
    specs: list[dict[str, Any]] = []
    for step in reversed(steps):  # a group's callbacks run on the next step's queue: known first
        if isinstance(step, Group):
            queue = specs[0]["queue"] if specs else step.members[0].queue
            members = [_step_spec(m, new_jid(), pass_results, result_ttl) for m in step.members]
            specs.insert(0, chain_group.spec(members, queue, pass_results, result_ttl))
        else:
            specs.insert(0, _step_spec(step, new_jid(), pass_results, result_ttl))
    conn = client.connection()
    record = keys.chain(cid)
    meta = [{"class": s["class"], "queue": s["queue"], "jid": s["jid"]} for s in specs]
    for entry, spec in zip(meta, specs, strict=True):
        if "group" in spec:
            entry["members"] = [
                {"class": m["class"], "queue": m["queue"], "jid": m["jid"]} for m in spec["group"]
            ]
    fields: dict[str, str | int] = {
        "steps": codec.dumps(meta),
        "created_at": repr(time.time()),
        "done": 0,
        "state": "running",
        "pass_results": int(pass_results),
    }
    first = specs[0]
    carried = {"id": cid, "step": 0, "next": specs[1:], "pass": pass_results, "ttl": int(ttl_s)}
    if "group" in first and shards.is_sharded():
        # The record and the group, as one home outbox entry, in one transaction; then moved
        # (api/chain_group_outbox.py). A lost reply may have written both: nothing to undo.
        from cogworker.api import chain_group_outbox

        chain_group_outbox.start(conn, first, carried, fields, int(ttl_s))
        return Chain(cid, tuple(s["jid"] for s in specs))
    pipe = conn.pipeline(transaction=True)
    pipe.hset(record, mapping=fields)  # type: ignore[arg-type]
    pipe.expire(record, int(ttl_s))
    pipe.execute()
    if "group" in first:
        try:
            chain_group.start(conn, first, carried)
        except BaseException as exc:
            # No answer (a lost reply): the group may be pushed, and its steps need the record.
            if not isinstance(exc, Exception) or not is_unavailable(exc):
                conn.delete(record)
            raise
        return Chain(cid, tuple(s["jid"] for s in specs))
    options = {**first["options"], FIELD: carried, "jid": first["jid"]}
    try:
        jid = client.push(
            first["class"], first["args"], first["kwargs"], queue=first["queue"], options=options
        )
    except BaseException as exc:
        if not may_be_queued(exc):  # else the first step may be queued: its record stays (a TTL ends it)
            conn.delete(record)
        raise
    if jid is None:
        conn.delete(record)
        return None
    return Chain(cid, tuple(s["jid"] for s in specs))


def chain_status(cid: str) -> dict[str, Any] | None:
    """Read a chain's state and each step's.

    Args:
        cid: The chain's id (`Chain.id`).

    Returns:
        A dict: `id`, `state` ("running", "complete", "dead" or "stopped"), `created_at`,
        `completed_at`, `done`, `total`, `pass_results`, `error`, and `steps` (each with `index`,
        `class`, `queue`, `jid`, `state`, `done_at`); None for an unknown or expired id.
    """
    from cogworker.ops.chains import chain_status as read

    return read(client.connection(), cid)
