"""The retry, scheduled and dead pages' actions (POST): retry now, delete and kill, for one entry, for
a selection, and for every entry (matching the page's filter, after a confirmation).

Each goes through the same atomic ops functions as `cogworker retry|scheduled|dead`, one entry at a
time by its key (`<score>-<ref>`, so no scan finds it): of two operators acting on one entry, one
succeeds and the other is told it was already gone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.routing import BaseRoute, Route

from cogworker.ops import NotFound, OpsError, set_actions
from cogworker.ops import sets as set_ops
from cogworker.ops.set_actions import BulkResult
from cogworker.ops.sets import Entry, Filter
from cogworker.web.actions import action, field, fields
from cogworker.web.state import WebState

SET_PATHS = {"retry": "/retries", "scheduled": "/scheduled", "dead": "/dead"}
# The UI kills from retries only: a scheduled job has not failed (no error to file it under), and
# an operator who wants it gone deletes it. `cogworker scheduled kill` still can.
KILLABLE = ("retry",)

# What one entry's action does, given (state, set name, ref, score): the entry it acted on.
Act = Callable[[WebState, str, str, float], Entry]


def filter_from(params: Mapping[str, object]) -> Filter:
    """The page's filter from its query string or a form's hidden fields (empty means no filter)."""

    def text(name: str) -> str | None:
        value = params.get(name)
        return value if isinstance(value, str) and value else None

    return Filter(
        job=text("job"),
        error=text("error"),
        args=text("args"),
        job_class=text("class"),
        error_class=text("error_class"),
    )


def describe(match: Filter) -> str:
    parts = []
    if match.job_class is not None:
        parts.append(f"job class is {match.job_class!r}")
    if match.error_class is not None:
        parts.append(f"error class is {match.error_class!r}")
    if match.job is not None:
        parts.append(f"job class contains {match.job!r}")
    if match.error is not None:
        parts.append(f"error contains {match.error!r}")
    if match.args is not None:
        parts.append(f"args contain {match.args!r}")
    return " and ".join(parts)


def _plural(count: int, one: str = "entry", many: str = "entries") -> str:
    return f"{count:,} {one if count == 1 else many}"


def _key(key: str) -> tuple[float, str]:
    parsed = set_ops.parse_key(key)
    if parsed is None:
        raise OpsError(f"{key!r} is not an entry key")
    return parsed


def _gone(set_name: str, ref: str) -> OpsError:
    return OpsError(
        f"Job {ref} was already gone from the {set_name} set (retried, deleted or killed meanwhile)."
    )


def _retry(state: WebState, set_name: str, ref: str, score: float) -> Entry:
    return set_actions.retry_now(state.client, state.scripts, set_name, ref, score)


def _delete(state: WebState, set_name: str, ref: str, score: float) -> Entry:
    return set_actions.delete(state.client, set_name, ref, score)


def _kill(state: WebState, set_name: str, ref: str, score: float) -> Entry:
    return set_actions.kill(state.client, state.scripts, state.settings, set_name, ref, score)


def _past(verb: str, set_name: str) -> str:
    """What a verb did, in the set's words: a scheduled job is enqueued, not retried."""
    return "Enqueued" if verb == "retry" and set_name == "scheduled" else PAST[verb]


def _one_text(verb: str, entry: Entry) -> str:
    name = entry.job or "unreadable"
    if verb == "retry":
        return f"{_past(verb, entry.set)} job {entry.ref} ({name}) onto queue {entry.queue}"
    if verb == "delete":
        return f"Deleted job {entry.ref} ({name}) from the {entry.set} set"
    return f"Killed job {entry.ref} ({name}): moved from the {entry.set} set to dead"


PAST = {"retry": "Retried", "delete": "Deleted", "kill": "Killed"}
ACTS: dict[str, Act] = {"retry": _retry, "delete": _delete, "kill": _kill}


def one(set_name: str, verb: str) -> Callable[[Request, WebState, FormData], str]:
    def operation(request: Request, state: WebState, form: FormData) -> str:
        score, ref = _key(field(form, "key"))
        try:
            entry = ACTS[verb](state, set_name, ref, score)
        except NotFound:
            raise _gone(set_name, ref) from None
        return _one_text(verb, entry)

    operation.__name__ = f"{verb}_{set_name}"
    return operation


def selected(set_name: str, verb: str) -> Callable[[Request, WebState, FormData], str]:
    """Each ticked entry through the single-entry op: counted done, already gone, or refused."""

    def operation(request: Request, state: WebState, form: FormData) -> str:
        keys = list(dict.fromkeys(fields(form, "key")))
        if not keys:
            raise OpsError("No entries selected: tick the boxes of the entries first.")
        done = gone = 0
        refused: list[str] = []
        for key in keys:
            try:
                score, ref = _key(key)
                ACTS[verb](state, set_name, ref, score)
                done += 1
            except NotFound:
                gone += 1
            except OpsError as exc:
                refused.append(str(exc))
        text = f"{_past(verb, set_name)} {_plural(done)}"
        if gone:
            text += f"; {gone:,} {'was' if gone == 1 else 'were'} already gone"
        if refused:
            text += f"; {_plural(len(refused), 'was', 'were')} refused: {refused[0]}"
        if not done:
            raise OpsError(text)
        return text

    operation.__name__ = f"{verb}_selected_{set_name}"
    return operation


def _bulk_text(verb: str, set_name: str, match: Filter, result: BulkResult) -> str:
    where = {"retry": "onto their queues", "delete": f"from the {set_name} set", "kill": "to dead"}[verb]
    text = f"{_past(verb, set_name)} {_plural(result.done)} {where}"
    if not match.empty:
        text += f" (those whose {describe(match)})"
    if result.unreadable:
        text += f"; {_plural(result.unreadable)} can't be retried (unreadable) and stayed"
    if result.gone:
        text += f"; {result.gone:,} {'was' if result.gone == 1 else 'were'} already gone"
    if result.wrong_type:
        # Some were left in place: an error flash, with the key the workers' guard will move aside.
        raise OpsError(text + f"; stopped: {', '.join(result.wrong_type)} has the wrong type, try again")
    return text


def every(set_name: str, verb: str) -> Callable[[Request, WebState, FormData], str]:
    def operation(request: Request, state: WebState, form: FormData) -> str:
        match = filter_from(form)
        if verb == "retry":
            result = set_actions.retry_all(state.client, state.scripts, set_name, match)
        elif verb == "delete":
            result = set_actions.delete_all(state.client, set_name, match)
        else:
            result = set_actions.kill_all(state.client, state.scripts, state.settings, set_name, match)
        return _bulk_text(verb, set_name, match, result)

    operation.__name__ = f"{verb}_all_{set_name}"
    return operation


def question(set_name: str, verb: str) -> Callable[[WebState, FormData], str]:
    """The confirmation page's question: how many (the count the listing showed) or which filter."""
    doing = {
        "retry": "Enqueue {} now?"
        if set_name == "scheduled"
        else "Retry {} now (put each back on its queue)?",
        "delete": "Delete {} for good?",
        "kill": "Kill {} (move them to the dead set)?",
    }[verb]
    if set_name == "scheduled" and verb == "retry":
        doing = "Enqueue {} now (each on its queue, before its time)?"

    def ask(state: WebState, form: FormData) -> str:
        match = filter_from(form)
        count = form.get("count")
        size = f"{int(count):,}" if isinstance(count, str) and count.isdigit() else "all its"
        if form.get("group") == "1":
            # A group's button (set_groups_web.py): `count` is the group's, counted over the whole set.
            return doing.format(f"the {size} entries of the {set_name} set whose {describe(match)}")
        if form.get("group") == "partial":
            return doing.format(
                f"every entry of the {set_name} set whose {describe(match)} ({size} counted in the part "
                "of the set read so far; the whole set is searched)"
            )
        if match.empty:
            return doing.format(f"all {size} entries of the {set_name} set")
        return doing.format(
            f"every entry of the {set_name} set whose {describe(match)} (all {size} entries are searched)"
        )

    return ask


def routes_for(set_name: str) -> list[BaseRoute]:
    base = SET_PATHS[set_name]
    verbs = ["retry", "delete", *(["kill"] if set_name in KILLABLE else [])]
    routes: list[BaseRoute] = []
    for verb in verbs:
        routes += [
            Route(f"{base}/{verb}", action(base)(one(set_name, verb)), methods=["POST"]),
            Route(f"{base}/{verb}-selected", action(base)(selected(set_name, verb)), methods=["POST"]),
            Route(
                f"{base}/{verb}-all",
                action(base, confirm=question(set_name, verb))(every(set_name, verb)),
                methods=["POST"],
            ),
        ]
    return routes
