"""The fault rules of the RESP proxy (resp_proxy.py), the names it gives Lua scripts, and the record
of the faults it injected.

A rule matches a command by name, by the Lua script it runs, and by a substring of its arguments;
`skip` lets that many matches pass first, `count` is how many times it fires (None: every time). A
lost reply or a delay may also ask for a reply containing (or lacking) some bytes: a command whose
reply doesn't qualify passes and the rule stays armed. A NOSCRIPT error never qualifies (the client
loads the script and runs it again, and that second run is the one the test means).
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.paths import ROOT

LOSE = "lose"
DROP = "drop"
DELAY = "delay"
SCRIPT_COMMANDS = ("EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO")


@dataclass
class Rule:
    """One armed fault. `fired` counts the commands it acted on, `seen` those it matched (skipped
    ones included)."""

    id: int
    action: str
    command: tuple[str, ...] = ()
    script: str | None = None
    arg: bytes | None = None
    count: int | None = 1
    skip: int = 0
    seconds: float = 0.0
    reply_contains: bytes | None = None
    reply_lacks: bytes | None = None
    fired: int = 0
    seen: int = 0

    def active(self) -> bool:
        return self.count is None or self.fired < self.count

    def matches(self, name: str, scripts: frozenset[str], args: list[bytes]) -> bool:
        """Whether the command is one this rule is about (its counters aside)."""
        if self.command and name not in self.command:
            return False
        if self.script is not None and self.script not in scripts:
            return False
        return self.arg is None or any(self.arg in a for a in args[1:])

    def qualifies(self, reply: bytes) -> bool:
        if reply.startswith(b"-NOSCRIPT"):
            return False
        if self.reply_contains is not None and self.reply_contains not in reply:
            return False
        return self.reply_lacks is None or self.reply_lacks not in reply

    def take(self) -> bool:
        """Count one qualifying match; True when the rule fires on it (past `skip`, within `count`)."""
        if not self.active():
            return False
        self.seen += 1
        if self.seen <= self.skip:
            return False
        self.fired += 1
        return True


@dataclass(frozen=True)
class Fault:
    """A fault the proxy injected: which rule, on which command (the script's names for a script),
    on which client connection, and for a lost reply the reply the client never saw."""

    rule: int
    action: str
    command: str
    scripts: tuple[str, ...]
    connection: int
    args: tuple[bytes, ...]
    reply: bytes | None = None
    at: float = field(default_factory=time.time)


class ScriptBook:
    """Names Lua scripts by their text: a script carries the name of every `.lua` file whose text it
    contains (a batch script, batch_lib.lua followed by its own, carries both). The prelude's
    helpers, which a script is loaded after (store/scripts.py), name nothing: they are part of the
    scripts, not one. Learnt from every SCRIPT LOAD and EVAL the proxy forwards, and from the texts
    given up front (the texts cogworker loads), so an EVALSHA of a script Redis cached before the
    proxy saw it is named too."""

    def __init__(self, lua_dir: Path, known_texts: tuple[str, ...] = ()) -> None:
        self._files = {
            p.stem: p.read_text().strip() for p in sorted(lua_dir.glob("*.lua")) if p.stem != "prelude"
        }
        self._names: dict[str, frozenset[str]] = {}
        self._lock = threading.Lock()
        for text in known_texts:
            self.learn(text.encode())

    def learn(self, text: bytes) -> str:
        sha = hashlib.sha1(text).hexdigest()
        with self._lock:
            if sha not in self._names:
                decoded = text.decode("utf-8", "replace")
                found = frozenset(name for name, body in self._files.items() if body and body in decoded)
                self._names[sha] = found or frozenset({f"?{sha[:10]}"})
        return sha

    def names(self, command: str, args: list[bytes]) -> frozenset[str]:
        """The names of the script a command runs (empty for a command that runs none)."""
        if command not in SCRIPT_COMMANDS or len(args) < 2:
            return frozenset()
        if command.startswith("EVALSHA"):
            sha = args[1].decode("ascii", "replace").lower()
            with self._lock:
                return self._names.get(sha, frozenset({f"?{sha[:10]}"}))
        sha = self.learn(args[1])
        with self._lock:
            return self._names[sha]

    def known(self) -> dict[str, frozenset[str]]:
        with self._lock:
            return dict(self._names)


def cogworker_script_texts() -> tuple[str, ...]:
    """Every script's text as cogworker loads it (store/scripts.py: its prelude helpers, then its
    file; the batch scripts built from several files), so its EVALSHA is named even when Redis
    cached it before the proxy saw its text (another process, straight on Redis, loaded it)."""
    from cogworker.store import batch_scripts, scripts

    # Not loaded alone: the prelude and the batch scripts' parts, which the batch texts below hold.
    parts = {"prelude", "batch_lib", "batch_filed", "batch_ack", "batch_close", "batch_open", "member_ack",
             "batch_end", "batch_apply", "batch_close_outbox"}  # fmt: skip
    files = sorted(
        p.stem for p in (ROOT / "cogworker" / "store" / "lua").glob("*.lua") if p.stem not in parts
    )
    batch = (
        "batch_ack",
        "batch_close",
        "batch_open",
        "filed:settle",
        "filed:file_unsettled",
        "filed:swap_dead",
        # The sharded layout's (store/batch_ends.py).
        "outboxed:member_ack",
        "outboxed:settle",
        "outboxed:file_unsettled",
        "outboxed:swap_dead",
        "batch_apply",
        "batch_close:outbox",
    )
    return (*(scripts.source(name) for name in files), *(batch_scripts.text(name) for name in batch))


class RuleBook:
    """The armed rules and the faults fired, shared by the proxy's loop and the test's thread."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._rules: list[Rule] = []
        self._next_id = 1
        self.faults: list[Fault] = []

    def arm(self, action: str, **match: object) -> Rule:
        with self._changed:
            rule = Rule(self._next_id, action, **match)  # type: ignore[arg-type]
            self._next_id += 1
            self._rules.append(rule)
            return rule

    def clear(self) -> None:
        with self._changed:
            self._rules.clear()

    def rules(self) -> list[Rule]:
        with self._changed:
            return list(self._rules)

    def drop_for(self, name: str, scripts: frozenset[str], args: list[bytes]) -> Rule | None:
        """The drop rule firing on this command, if any (a drop is decided before it is sent)."""
        with self._changed:
            for rule in self._rules:
                matched = rule.action == DROP and rule.active() and rule.matches(name, scripts, args)
                if matched and rule.take():
                    return rule
        return None

    def candidates(self, name: str, scripts: frozenset[str], args: list[bytes]) -> list[Rule]:
        """The lose and delay rules that may fire on this command once its reply is known."""
        with self._changed:
            return [
                rule
                for rule in self._rules
                if rule.action != DROP and rule.active() and rule.matches(name, scripts, args)
            ]

    def verdict(self, candidates: list[Rule], reply: bytes) -> Rule | None:
        """The first candidate firing on this reply, if any."""
        with self._changed:
            for rule in candidates:
                if rule.qualifies(reply) and rule.take():
                    return rule
        return None

    def record(self, fault: Fault) -> None:
        with self._changed:
            self.faults.append(fault)
            self._changed.notify_all()

    def wait_fired(self, rule: Rule, times: int, timeout: float) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: rule.fired >= times, timeout):
                raise TimeoutError(f"rule {rule.id} ({rule.action}) fired {rule.fired} of {times} times")
