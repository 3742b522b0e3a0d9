"""Typed arguments: a job whose parameters are annotated with pydantic models, dataclasses, `datetime`,
`date`, `time`, `timedelta`, `UUID`, `Decimal` or an `Enum` (or lists, tuples, sets, dicts and
Optionals of them) takes such values.

At push each such argument is checked against its annotation and written as JSON (pydantic's
TypeAdapter, `mode="json"`), the path of a bad value in the TypeError as for any argument; before the
job runs it is rebuilt from the same annotation. A payload that no longer validates (the model changed
between the push and the run) fails with `cogworker.InvalidArguments` naming the argument and field,
before the job's body starts; it is a failure like any other (retried, then dead): during a rolling
deploy an old worker may fetch a job a new client pushed, and the retry runs on an updated worker.
`discard_on=(cogworker.InvalidArguments,)` sends it to dead at once instead.

Whether a job has any such parameter is decided once, when `@job` decorates it (`plan`); a job with
none gets None and pays nothing at push or run. Parameters annotated with JSON-native types (or not
annotated) are never touched: their arguments travel exactly as they always did.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import inspect
import sys
import typing
import uuid
from collections.abc import Callable
from typing import Any

# Leaf types that aren't JSON-native but that pydantic writes to JSON and reads back exactly.
_RICH_LEAVES: tuple[type, ...] = (dt.datetime, dt.date, dt.time, dt.timedelta, uuid.UUID, decimal.Decimal)


class InvalidArguments(TypeError):
    """A job's payload doesn't match its parameters' annotations (a model changed between the push
    and the run).

    Raised in the worker before the job's body runs, naming the argument and the field; the job
    fails with it and follows its retry policy. Make the job accept both shapes (a default for a
    new field) until the old pushes have run, or fix and retry them from the dead set. A push whose
    arguments don't fit raises TypeError instead, before anything is written.
    """


# Its public name: the error class a dead job records, whatever module defines it.
InvalidArguments.__module__ = "cogworker"


def _is_rich(annotation: Any) -> bool:
    """Does this annotation (or anything inside it: list[Model], Optional[UUID]...) name a type
    whose values aren't JSON-native?"""
    if isinstance(annotation, type):
        if issubclass(annotation, (*_RICH_LEAVES, enum.Enum, tuple, set, frozenset)):
            return True
        if dataclasses.is_dataclass(annotation):
            return True
        pydantic = sys.modules.get("pydantic")  # no model can exist before pydantic is imported
        if pydantic is not None and issubclass(annotation, pydantic.BaseModel):
            return True
    origin = typing.get_origin(annotation)
    if origin in (tuple, set, frozenset):
        return True
    return any(_is_rich(arg) for arg in typing.get_args(annotation) if not isinstance(arg, str | int))


class _Adapter:
    """One parameter's conversions, both ways, through pydantic's TypeAdapter."""

    __slots__ = ("adapter",)

    def __init__(self, annotation: Any) -> None:
        from pydantic import TypeAdapter  # only for jobs that have typed parameters

        self.adapter: Any = TypeAdapter(annotation)

    def dump(self, value: Any, path: str) -> Any:
        from pydantic import ValidationError

        try:
            return self.adapter.dump_python(self.adapter.validate_python(value), mode="json")
        except ValidationError as exc:
            raise TypeError(_describe(exc, path)) from None

    def load(self, value: Any, path: str) -> Any:
        from pydantic import ValidationError

        try:
            return self.adapter.validate_python(value)
        except ValidationError as exc:
            raise InvalidArguments(_describe(exc, path)) from None


def _describe(exc: Any, path: str) -> str:
    """Each error of a pydantic ValidationError on one line, at its path within the argument, as
    `args[0]['address']['zip']: Field required`; the input isn't quoted (it may be a secret)."""
    lines = []
    for error in exc.errors(include_input=False, include_url=False):
        where = path + "".join(f"[{part!r}]" for part in error["loc"])
        lines.append(f"{where}: {error['msg']}")
    return "; ".join(lines)


class TypedArgs:
    """Where a job's typed parameters are among its positional and keyword arguments."""

    __slots__ = ("by_name", "positional", "var_keyword", "var_positional")

    def __init__(
        self,
        positional: list[_Adapter | None],
        var_positional: _Adapter | None,
        by_name: dict[str, _Adapter],
        var_keyword: _Adapter | None,
    ) -> None:
        self.positional = positional
        self.var_positional = var_positional
        self.by_name = by_name
        self.var_keyword = var_keyword

    def _for_position(self, index: int) -> _Adapter | None:
        return self.positional[index] if index < len(self.positional) else self.var_positional

    def _convert(
        self, args: Any, kwargs: dict[str, Any], step: Callable[[_Adapter, Any, str], Any]
    ) -> tuple[list[Any], dict[str, Any]]:
        new_args = list(args)
        for index, value in enumerate(new_args):
            adapter = self._for_position(index)
            if adapter is not None:
                new_args[index] = step(adapter, value, f"args[{index}]")
        new_kwargs = dict(kwargs)
        for name, value in new_kwargs.items():
            adapter = self.by_name.get(name, self.var_keyword)
            if adapter is not None:
                new_kwargs[name] = step(adapter, value, f"kwargs[{name!r}]")
        return new_args, new_kwargs

    def dump(self, args: Any, kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """The arguments as they are pushed: typed ones checked and written as JSON-native values
        (TypeError naming the path of a bad one)."""
        return self._convert(args, kwargs, _Adapter.dump)

    def load(self, args: Any, kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """The arguments as the job gets them: typed ones rebuilt (InvalidArguments when one
        no longer fits its annotation)."""
        return self._convert(args, kwargs, _Adapter.load)


def _hints(func: Callable[..., Any], strict: bool) -> dict[str, Any]:
    """The parameters' annotations, resolved. `strict`: raise NameError when one can't be (a forward
    reference to a class defined further down); otherwise leave that one out, as a name imported only
    under TYPE_CHECKING never resolves and such a parameter must work as it always did."""
    try:
        return typing.get_type_hints(func, include_extras=True)
    except NameError:
        if strict:
            raise
    hints: dict[str, Any] = {}
    for name, annotation in inspect.get_annotations(func).items():
        if isinstance(annotation, str):
            try:
                annotation = eval(annotation, getattr(func, "__globals__", {}))
            except Exception:
                continue
        hints[name] = annotation
    return hints


class PlanLater:
    """A job whose annotations couldn't all be resolved at decoration: planned on first use, when
    the module has finished importing, and replaced on its job by the outcome."""

    __slots__ = ("func", "owner")

    def __init__(self, func: Callable[..., Any], owner: Any) -> None:
        self.func = func
        self.owner = owner

    def _resolve(self) -> TypedArgs | None:
        resolved = plan(self.func, strict=False)
        self.owner.typed = resolved
        return resolved

    def dump(self, args: Any, kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        resolved = self._resolve()
        return resolved.dump(args, kwargs) if resolved is not None else (list(args), dict(kwargs))

    def load(self, args: Any, kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        resolved = self._resolve()
        return resolved.load(args, kwargs) if resolved is not None else (list(args), dict(kwargs))


def plan_for(func: Callable[..., Any], owner: Any) -> TypedArgs | PlanLater | None:
    """What `@job` keeps on the job `owner` as `typed`: its TypedArgs, None (nothing to convert: the
    common case, which costs nothing) or, when an annotation isn't resolvable yet, a stand-in that
    plans on first use."""
    try:
        return plan(func, strict=True)
    except NameError:
        return PlanLater(func, owner)


def plan(func: Callable[..., Any], *, strict: bool) -> TypedArgs | None:
    """The job's TypedArgs, or None when no parameter needs converting."""
    hints = _hints(func, strict)
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):  # a callable with no signature to read
        return None
    positional: list[_Adapter | None] = []
    by_name: dict[str, _Adapter] = {}
    var_positional = var_keyword = None
    found = False
    for parameter in parameters:
        hint = hints.get(parameter.name)
        adapter = _Adapter(hint) if hint is not None and _is_rich(hint) else None
        found = found or adapter is not None
        if parameter.kind is parameter.VAR_POSITIONAL:
            var_positional = adapter
        elif parameter.kind is parameter.VAR_KEYWORD:
            var_keyword = adapter
        else:
            if parameter.kind is not parameter.KEYWORD_ONLY:
                positional.append(adapter)
            if adapter is not None and parameter.kind is not parameter.POSITIONAL_ONLY:
                by_name[parameter.name] = adapter
    return TypedArgs(positional, var_positional, by_name, var_keyword) if found else None
