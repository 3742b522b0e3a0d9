"""The types of the job options `@job(...)` and `.set(...)` take as keyword parameters, and the
marker of an option left out.

Each option is an explicit keyword parameter, so a type checker and an IDE know every one of them
and their types. Their default is `UNSET`, not None: None is a value a caller may give (`.set(unique=None)`
turns uniqueness off for the pushes it makes), and an option not given must stay out of the job's
options, because `.set(...)` merges its options over the job's and the payload is built from
whatever is there. `given(...)` keeps only the options a caller passed.

The checks of each option's value stay in the modules that own the option (api/features.py
`OPTIONS`), so an untyped caller's bad value is still a TypeError that names it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

if TYPE_CHECKING:
    # Not imported at run time: a process whose jobs use no limiter never loads the limiter modules.
    from cogworker.api.limit_base import Limiter

__all__ = ["UNSET", "ErrorClasses", "LimitOption", "RetryIn", "Unique", "given"]


class _Unset:
    """The type of `UNSET`: one instance, shown as `UNSET` in signatures and reprs."""

    def __repr__(self) -> str:
        return "UNSET"


# Typed Any so it can be the default of a parameter of any type: the signature a caller reads says
# `queue: str = UNSET`, and the type is the option's own, with no marker type in the union.
UNSET: Any = _Unset()

# `retry_on` / `discard_on`: an exception class or a tuple of them (api/retry_filters.py).
ErrorClasses: TypeAlias = type[BaseException] | tuple[type[BaseException], ...]
# `retry_in`: fn(count, exc) -> seconds before the next try, or None for the default backoff.
RetryIn: TypeAlias = Callable[[int, BaseException], float | None]
# `limit`: a limiter, or a function of the job's arguments that returns one (api/limit_jobs.py).
LimitOption: TypeAlias = "Limiter | Callable[..., Limiter]"
# `unique`: the one kind of uniqueness there is (store/locks.py UNTIL_EXECUTED).
Unique: TypeAlias = Literal["until_executed"]


def given(**options: Any) -> dict[str, Any]:
    """The options a caller passed, in the order given: those still `UNSET` are left out."""
    return {name: value for name, value in options.items() if value is not UNSET}
