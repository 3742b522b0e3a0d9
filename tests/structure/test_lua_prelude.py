"""The scripts' shared helpers live once, in cogworker/store/lua/prelude.lua.

store/scripts.py loads each script after the prelude helpers it calls. A script that writes a
helper out again (a `local function` of a prelude helper's name) shadows the prelude's, and the two
drift apart; a script that reads TYPE itself instead of through the prelude's check repeats the
check-every-key-before-the-first-write rule by hand, where the next copy forgets a key.
"""

from __future__ import annotations

import re

from cogworker.store import scripts
from tests.support.paths import ROOT

LUA = ROOT / "cogworker" / "store" / "lua"
LOCAL_FUNCTION = re.compile(r"\blocal\s+function\s+(\w+)")
TYPE_CALL = re.compile(r"""redis\.p?call\(\s*["']TYPE["']""", re.IGNORECASE)
# A line's comment: `--` and what follows, when no quote comes before it. A line with a quote before
# its `--` is checked whole, comment and all: a `--` in a string never hides code from the checks.
COMMENT = re.compile(r"""^([^"']*?)--.*$""")


def code_of(line: str) -> str:
    match = COMMENT.match(line)
    return match.group(1) if match else line


def script_texts() -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(LUA.glob("*.lua")) if path.stem != "prelude"}


def duplicated_helpers(text: str) -> list[str]:
    """Lines of `text` defining a function with a prelude helper's name."""
    names = set(scripts.helpers())
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        match = LOCAL_FUNCTION.search(code_of(line))
        if match and match.group(1) in names:
            found.append(f"{number}: {line.strip()}")
    return found


def type_checks(text: str) -> list[str]:
    """Lines of `text` that call TYPE themselves."""
    return [
        f"{n}: {line.strip()}"
        for n, line in enumerate(text.splitlines(), 1)
        if TYPE_CALL.search(code_of(line))
    ]


def test_the_prelude_defines_its_helpers() -> None:
    helpers = scripts.helpers()
    assert {"first_wrong_type", "is_wrong_type", "read_declared", "count_orphaning"} <= set(helpers)
    prelude = scripts.body("prelude")
    assert type_checks(prelude), "the prelude's own TYPE check is what the scripts call"


def test_no_script_writes_a_prelude_helper_out_again() -> None:
    found = {name: duplicated_helpers(text) for name, text in script_texts().items()}
    assert {name: lines for name, lines in found.items() if lines} == {}


def test_no_script_checks_a_type_by_hand() -> None:
    found = {name: type_checks(text) for name, text in script_texts().items()}
    assert {name: lines for name, lines in found.items() if lines} == {}


def test_a_loaded_script_carries_the_helpers_it_calls() -> None:
    """What a script calls is defined above it in the text Redis gets, once, and nothing else is."""
    helpers = scripts.helpers()
    for name in script_texts():
        stem = name.removesuffix(".lua")
        loaded = scripts.source(stem)
        assert loaded.endswith(scripts.body(stem))
        defined = LOCAL_FUNCTION.findall(loaded[: -len(scripts.body(stem))])
        assert len(defined) == len(set(defined)), stem
        for helper in helpers:
            if re.search(rf"\b{helper}\(", scripts.body(stem)):
                assert helper in defined, f"{stem} calls {helper} but is loaded without it"
