"""The public API's docstrings, as the docs site's API reference renders them (Google style).

Walks every name in `cogworker.__all__` (a module's public names, a class's public methods and
properties, an object's class), the testing modes and the contrib entry points: each has a
docstring; a function with parameters has an `Args:` section naming exactly its parameters (keyword
parameters may be under `Keyword Args:` instead), and one that returns something a `Returns:`
section. The options `@job` and `.set(...)` document, and declare as keyword parameters, are the
options they accept (api/features.py `OPTIONS`): a new option can't go undocumented or untyped.
"""

from __future__ import annotations

import importlib
import inspect
import re
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import cogworker
from cogworker.api import features
from cogworker.api.decorator import JobFunction
from cogworker.api.retry_filters import WORKER_SIDE

# Modules users call into besides `cogworker` itself: the testing modes and the integrations. Their
# `__all__`, or else every public name they define. Django's worker module is left out: importing
# it sets Django up (it is named in COGWORKER_REQUIRE, not called).
ENTRY_MODULES = (
    "cogworker.testing",
    "cogworker.contrib.fastapi",
    "cogworker.contrib.otel",
    "cogworker.contrib.sentry",
    "cogworker.contrib.django",
    "cogworker.contrib.django.tasks",
)

_SECTION = re.compile(r"^(\w[\w ]*):\s*$")
# An entry of a Google-style section: `name (type): text` or `name: text`, `*args`/`**kwargs` too.
_ENTRY = re.compile(r"^(\*{0,2}\w+)(?: \(([^)]*)\))?:(?:\s|$)")


def sections(doc: str) -> dict[str, list[str]]:
    """A cleaned docstring's sections (`Args`, `Returns`...) -> their lines, dedented once."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in doc.splitlines():
        heading = _SECTION.match(line)
        if heading is not None:
            current = found.setdefault(heading.group(1), [])
        elif current is not None and (line.startswith("    ") or not line.strip()):
            current.append(line[4:])
        else:
            current = None
    return found


def entries(lines: list[str]) -> dict[str, str]:
    """A section's entries: name -> its text (continuation lines joined), stars kept off the name."""
    found: dict[str, str] = {}
    name = None
    for line in lines:
        match = _ENTRY.match(line)
        if match is not None:
            name = match.group(1).lstrip("*")
            found[name] = line
        elif name is not None and line.strip():
            found[name] += "\n" + line
    return found


def _members(qualname: str, cls: type) -> Iterator[tuple[str, Any]]:
    """A class's public methods and properties, its cogworker bases' included."""
    seen: set[str] = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("cogworker"):
            continue
        for name, value in vars(klass).items():
            if name.startswith("_") or name in seen:
                continue
            seen.add(name)
            if isinstance(value, staticmethod | classmethod):
                value = value.__func__
            if isinstance(value, property) or inspect.isfunction(value):
                yield f"{qualname}.{name}", value


def _walk(qualname: str, obj: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(obj, types.ModuleType):
        names = getattr(obj, "__all__", None) or [
            n for n, v in vars(obj).items() if getattr(v, "__module__", None) == obj.__name__
        ]
        for name in names:
            if not name.startswith("_"):
                yield from _walk(f"{qualname}.{name}", getattr(obj, name))
    elif isinstance(obj, type):
        yield qualname, obj
        yield from _members(qualname, obj)
    elif inspect.isfunction(obj):
        yield qualname, obj
    elif type(obj).__module__.startswith("cogworker"):  # an instance: `client_chain`
        yield from _members(qualname, type(obj))


def public_api() -> list[tuple[str, Any]]:
    found = []
    for name in cogworker.__all__:
        if name != "__version__":
            found += _walk(f"cogworker.{name}", getattr(cogworker, name))
    for module in ENTRY_MODULES:
        found += _walk(module, importlib.import_module(module))
    return found


def _parameters(fn: Callable[..., Any]) -> list[str]:
    return [name for name in inspect.signature(fn).parameters if name not in ("self", "cls")]


def _returns_something(fn: Callable[..., Any]) -> bool:
    annotation = inspect.signature(fn).return_annotation
    return annotation not in (inspect.Signature.empty, None, "None") and not inspect.isgeneratorfunction(fn)


def problems(qualname: str, obj: Any) -> list[str]:
    """What the docstring of one public object lacks, as sentences naming it."""
    # Its own docstring: inspect.getdoc would lend a method its base's, which the API reference
    # doesn't show, and a dataclass without one gets its signature as one.
    doc = obj.__doc__
    if not doc or not doc.strip() or (isinstance(obj, type) and doc.startswith(f"{obj.__name__}(")):
        return [f"{qualname} has no docstring"]
    doc = inspect.cleandoc(doc)
    if not inspect.isfunction(obj):
        return []
    found = sections(doc)
    wrong = []
    params = _parameters(obj)
    documented = list(entries(found.get("Args", []))) + list(entries(found.get("Keyword Args", [])))
    if params and "Args" not in found:
        wrong.append(f"{qualname} has parameters ({', '.join(params)}) but no Args: section")
    elif sorted(documented) != sorted(params):
        wrong.append(f"{qualname}'s Args: section names {documented}, its parameters are {params}")
    if _returns_something(obj) and "Returns" not in found and "Yields" not in found:
        wrong.append(f"{qualname} returns something but has no Returns: section")
    return wrong


def test_the_walk_reaches_the_whole_api() -> None:
    names = {qualname for qualname, _ in public_api()}
    for expected in (
        "cogworker.job",
        "cogworker.JobFunction.perform_async",
        "cogworker.JobFunction.perform_in",
        "cogworker.JobFunction.perform_at",
        "cogworker.JobFunction.set",
        "cogworker.Batch.add",
        "cogworker.CurrentJob.raise_if_cancelled",
        "cogworker.Settings.queue_spec",
        "cogworker.limiter.concurrent",
        "cogworker.client_chain.add",
        "cogworker.PushOutcomeUnknown",
        "cogworker.testing.fake",
        "cogworker.contrib.django.on_commit",
    ):
        assert expected in names


def test_every_public_object_has_a_complete_docstring() -> None:
    wrong = [problem for qualname, obj in public_api() for problem in problems(qualname, obj)]
    assert wrong == []


def _options(doc: str | None) -> dict[str, str]:
    return entries(sections(inspect.cleandoc(doc or "")).get("Keyword Args", []))


def test_job_documents_every_option_it_accepts() -> None:
    documented = _options(cogworker.job.__doc__)
    assert sorted(documented) == sorted(features.OPTIONS)
    for name, text in documented.items():
        assert re.match(rf"{name} \([^)]+\): ", text), f"{name}: no type"
        assert "Default" in text, f"{name}: no default"


def _keyword_parameters(fn: Callable[..., Any]) -> list[str]:
    kinds = (inspect.Parameter.KEYWORD_ONLY,)
    return sorted(p.name for p in inspect.signature(fn).parameters.values() if p.kind in kinds)


def test_job_and_set_declare_every_option_as_a_keyword_parameter() -> None:
    # A type checker and an IDE read the signature: an option only features.OPTIONS knows would
    # be refused by both, and one only the signature knows would be refused at run time.
    assert _keyword_parameters(cogworker.job) == sorted([*features.OPTIONS, "name"])
    assert _keyword_parameters(JobFunction.set) == sorted(set(features.OPTIONS) - WORKER_SIDE)


def test_set_documents_every_option_a_push_may_change_as_job_does() -> None:
    documented = _options(JobFunction.set.__doc__)
    assert sorted(documented) == sorted(set(features.OPTIONS) - WORKER_SIDE)
    declared = _options(cogworker.job.__doc__)
    for name, text in documented.items():
        assert text == declared[name], f"{name}: .set(...) and @job describe it differently"


@pytest.mark.parametrize(
    ("doc", "wrong"),
    [
        (None, "has no docstring"),
        ("Push it.\n\nReturns:\n    Its jid.\n", "but no Args: section"),
        ("Push it.\n\nArgs:\n    first: A.\n\nReturns:\n    Its jid.\n", "are ['first', 'second']"),
        ("Push it.\n\nArgs:\n    first: A.\n    second: B.\n", "no Returns: section"),
    ],
)
def test_a_missing_part_is_reported(doc: str | None, wrong: str) -> None:
    def push(first: int, second: int) -> str:
        return str(first + second)

    push.__doc__ = doc
    found = problems("push", push)
    assert len(found) == 1
    assert wrong in found[0]


def test_an_option_missing_from_the_docstring_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(features.OPTIONS, "priority", None)
    with pytest.raises(AssertionError):
        test_job_documents_every_option_it_accepts()
    with pytest.raises(AssertionError):
        test_set_documents_every_option_a_push_may_change_as_job_does()
    with pytest.raises(AssertionError):
        test_job_and_set_declare_every_option_as_a_keyword_parameter()
