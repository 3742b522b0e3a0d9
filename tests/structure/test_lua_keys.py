"""Every key a Lua script touches is passed in KEYS (issue 17 §1).

Redis Cluster routes a script by its declared keys (EVALSHA goes to the node of the first one) and
refuses a key of another slot; Dragonfly refuses any undeclared key. So no script may build a key
name out of ARGV, directly (`ARGV[1] .. queue`) or through a local holding an ARGV value
(`local prefix = ARGV[5]` ... `prefix .. jid`), nor hand an ARGV value to a command as its key. A
line that concatenates an ARGV value for another reason says so in a comment: `-- not a key: ...`
(a score bound, a search text), or, for a computed key the script truly can't be given, `-- same
slot: ...` with the reason it shares a declared key's hash slot. tests/e2e/prefix/test_one_slot.py
checks the same thing at run time, command by command.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.paths import ROOT

LUA = ROOT / "cogworker" / "store" / "lua"
JUSTIFIED = re.compile(r"--\s*(same slot|not a key):\s*\S")
ARGV_LOCAL = re.compile(r"^\s*local\s+([\w\s,]+?)\s*=\s*(.+)$")
ARGV_VALUE = re.compile(r"^\s*(tonumber\()?ARGV\[")
KEY_FROM_ARGV = re.compile(r'redis\.p?call\(\s*"\w+"\s*,\s*ARGV\[')


def code_of(line: str) -> str:
    """The line without its comment (a `--` outside a string starts one)."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif line.startswith("--", i):
            return line[:i]
    return line


def argv_locals(lines: list[str]) -> set[str]:
    """Locals assigned straight from ARGV (`local a, b = ARGV[1], ARGV[2]`)."""
    names: set[str] = set()
    for line in lines:
        match = ARGV_LOCAL.match(code_of(line))
        if match:
            targets = [t.strip() for t in match.group(1).split(",")]
            values = [v.strip() for v in match.group(2).split(",")]
            names |= {t for t, v in zip(targets, values, strict=False) if ARGV_VALUE.match(v)}
    return names


def offences(text: str) -> list[str]:
    """Lines that build a string from an ARGV value, or pass one as a key, without a justification."""
    lines = text.splitlines()
    sources = [r"ARGV\[[^\]]*\]", *(rf"\b{re.escape(name)}\b" for name in argv_locals(lines))]
    concat = re.compile("|".join(rf"(?:{s})\s*\.\.|\.\.\s*(?:{s})" for s in sources))
    found = []
    for number, line in enumerate(lines, 1):
        code = code_of(line)
        if (concat.search(code) or KEY_FROM_ARGV.search(code)) and not JUSTIFIED.search(line):
            found.append(f"{number}: {line.strip()}")
    return found


def scripts() -> list[Path]:
    found = sorted(LUA.glob("*.lua"))
    assert len(found) >= 17
    return found


def test_no_script_builds_a_key_from_argv() -> None:
    wrong = {path.name: offences(path.read_text()) for path in scripts()}
    assert {name: lines for name, lines in wrong.items() if lines} == {}


def test_every_script_takes_a_key() -> None:
    """A cluster client routes EVALSHA by its first key: a script given none can't be routed. The
    prelude runs only in front of a script (its helpers are given that script's keys)."""
    runs = [path for path in scripts() if path.name != "prelude.lua"]
    assert [path.name for path in runs if "KEYS[1" not in path.read_text()] == []


def test_the_check_finds_keys_built_from_argv() -> None:
    assert offences('redis.call("RPUSH", ARGV[1] .. queue, job)') != []
    assert offences("local key = queue .. ARGV[2]") != []
    assert offences("local counter_prefix = ARGV[5]\nlocal key = counter_prefix .. jid") != []
    assert offences("local n, prefix = tonumber(ARGV[1]), ARGV[2]\nx = prefix .. jid") != []
    assert offences('redis.call("GET", ARGV[3])') != []
    assert offences('redis.call("HGET", KEYS[3], ARGV[2])') == []
    assert offences('local bound = "(" .. ARGV[6]  -- not a key: a score bound') == []
    assert offences("local k = ARGV[1] .. jid  -- same slot: ") != []  # a justification says why
    assert offences('local s = "-- ARGV[1] .. x"') != []  # a string is not a comment
