"""MkDocs hooks (mkdocs.yml `hooks:`) that write the reference pages from the code at build time.

A reference page holds a marker line, `<!-- reference: settings -->` (or `cli`, `api`), which
`on_page_markdown` replaces with the generated text. The pages stay real files in the nav, so a
missing one still fails `mkdocs build --strict`, and nothing generated is committed that could go
stale: a setting, a subcommand or a name added to `cogworker.__all__` is on the site at the next build.

Hooks rather than mkdocs-gen-files: three small functions of the code, and one dependency less.
The same functions are what tests/structure/test_docs_reference.py checks.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import itertools
import logging
import re
import types
import typing
from pathlib import Path
from typing import Any

# A warning on MkDocs' logger counts as one under --strict: the build fails, with every other warning.
log = logging.getLogger("mkdocs.hooks.reference")
MARKER = re.compile(r"^<!-- reference: (\w+) -->$", re.M)


# ---- settings --------------------------------------------------------------------------------


def setting_descriptions() -> dict[str, str]:
    """Each field's attribute docstring (the string right below it) in SettingsFields."""
    from cogworker import settings_fields

    tree = ast.parse(Path(inspect.getfile(settings_fields)).read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SettingsFields")
    found: dict[str, str] = {}
    body = cls.body
    for field, after in itertools.pairwise(body):
        if (
            isinstance(field, ast.AnnAssign)
            and isinstance(field.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            found[field.target.id] = inspect.cleandoc(after.value.value)
    return found


def _type_text(annotation: Any) -> str:
    if typing.get_origin(annotation) is typing.Literal:
        return " \\| ".join(f"`{value}`" for value in typing.get_args(annotation))
    if isinstance(annotation, types.UnionType):
        return " or ".join("unset" if arg is type(None) else _type_text(arg) for arg in annotation.__args__)
    return {
        "str": "text",
        "float": "seconds",
        "int": "integer",
        "bool": "true/false",
        "Secret": "text, secret (shown as ***)",
    }.get(annotation.__name__, annotation.__name__)


def setting_rules(name: str) -> list[str]:
    """What cogworker.settings.Settings checks about one field, beyond its type."""
    from cogworker import settings

    rules: list[str] = []
    annotation = typing.get_type_hints(settings.SettingsFields)[name]
    if float in (annotation, *typing.get_args(annotation)):
        rules.append("above 0 and at most ten years")
    if name in settings.WHOLE_SECONDS:
        rules.append("whole seconds")
    for smaller, larger, why in settings.MUST_BE_ABOVE:
        if name == larger:
            rules.append(f"above `COGWORKER_{smaller.upper()}` ({why})")
    checks = settings.Settings.__pydantic_decorators__.field_validators
    for check, text in VALIDATOR_RULES.items():
        if name in checks[check].info.fields:
            rules.append(text)
    if name == "respawn_max_delay_s":
        rules.append("at least `COGWORKER_RESPAWN_BASE_DELAY_S` (the delays grow from one to the other)")
    return rules


# What each field validator of Settings checks, in a user's words; a test fails when a validator
# is missing here, so a new check can't be left off the page.
VALIDATOR_RULES = {
    "_check_url": "a `redis://`, `rediss://`, `unix://`, `redis(s)+cluster://` or `redis+sentinel://` URL",
    "_readable_file": "a file this process can read (checked at start)",
    "_check_prefix": "see [Sharing one Redis](../deployment/redis.md#sharing-one-redis-the-key-prefix)",
    "_check_queues": "`a:3,b:1` (weighted) or `a,b` (strict order), not a mix",
    "_check_partitions": "`4` (every queue) or `default=4,reports=2`; each count from 1 to 64",
    "_check_log_levels": "`logger=level` pairs, comma-separated; levels `debug` to `critical`, each logger once",
    "_can_pin": "`spread` needs a platform that can pin a process to a CPU",
    "_not_negative": "0 or more",
    "_positive_int": "1 or more",
    "_positive_mem": "1 or more, or unset",
    "_port": "a TCP port (1 to 65535), or unset",
    "_web_port": "a TCP port (1 to 65535)",
    "_seconds": "",
}


def settings_markdown() -> str:
    from cogworker.settings_fields import FIELD_NAMES, SettingsFields

    hints = typing.get_type_hints(SettingsFields)
    descriptions = setting_descriptions()
    out = ["| Variable | Type | Default | Rules |", "|---|---|---|---|"]
    sections = []
    for name in FIELD_NAMES:
        variable = f"COGWORKER_{name.upper()}"
        # The count's default is the building machine's CPUs: say what it is, not what it was there.
        default = "one per usable CPU" if name == "count" else _default_text(getattr(SettingsFields, name))
        rules = "; ".join(rule for rule in setting_rules(name) if rule)
        out.append(f"| [`{variable}`](#{name}) | {_type_text(hints[name])} | {default} | {rules} |")
        sections.append(f"### `{variable}` {{#{name}}}\n\n{descriptions.get(name, '')}\n")
    return "\n".join(out) + "\n\n" + "\n".join(sections)


def _default_text(value: object) -> str:
    text = str(value)
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{text.lower()}`"
    if isinstance(value, float) and value.is_integer():
        text = f"{value:.0f}"
    return f"`{text}`" if text else "(empty)"


# ---- CLI -------------------------------------------------------------------------------------


def parsers() -> dict[str, argparse.ArgumentParser]:
    from cogworker.cli.main import build_parser as cogworker_parser
    from supervisor.main import build_parser as swarm_parser

    return {"cogworker": cogworker_parser(), "cogworker-swarm": swarm_parser()}


def subcommands(parser: argparse.ArgumentParser, prefix: str) -> dict[str, argparse.ArgumentParser]:
    """Every command line under parser, by its full name (`cogworker dead retry`), parser included."""
    found = {prefix: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= subcommands(sub, f"{prefix} {name}")
    return found


def _summaries(parser: argparse.ArgumentParser) -> dict[int, str]:
    """Each subparser's one-line help (what `cogworker --help` lists), by the subparser's id."""
    found: dict[int, str] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                sub = action.choices[choice.dest]
                found[id(sub)] = choice.help or ""
                found |= _summaries(sub)
    return found


def _option_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
            continue
        names = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.metavar or action.dest}`"
        if action.option_strings and action.nargs != 0:
            names += f" `{action.metavar or action.dest.upper()}`"
        rows.append(f"| {names} | {_cell(action.help or '')} |")
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def cli_markdown() -> str:
    out = []
    for prog, parser in parsers().items():
        commands = subcommands(parser, prog)
        summaries = _summaries(parser)
        # An alias (`cogworker scheduled enqueue` for `... retry`) is the same parser: one section.
        names: dict[int, list[str]] = {}
        for command, sub in commands.items():
            names.setdefault(id(sub), []).append(command)
        for command, sub in commands.items():
            if names[id(sub)][0] != command:
                continue
            level = "##" if command == prog else "###"
            out.append(f"{level} `{command}`\n")
            out.append(f"```text\n{sub.format_usage().removeprefix('usage: ').strip()}\n```\n")
            for alias in names[id(sub)][1:]:
                out.append(f"Also spelt `{alias}`.\n")
            if not sub.description and summaries.get(id(sub)):
                out.append(summaries[id(sub)][0].upper() + summaries[id(sub)][1:] + ".\n")
            if sub.description:
                raw = isinstance(sub.formatter_class, type) and issubclass(
                    sub.formatter_class, argparse.RawDescriptionHelpFormatter
                )
                text = sub.description.strip()
                out.append(f"```text\n{text}\n```\n" if raw else text + "\n")
            if sub.epilog:
                out.append(f"```text\n{sub.epilog.strip()}\n```\n")
            rows = _option_rows(sub)
            if rows:
                out += ["| Argument | Meaning |", "|---|---|", *rows, ""]
    return "\n".join(out)


# ---- API -------------------------------------------------------------------------------------


def api_names() -> list[str]:
    import cogworker

    return [name for name in cogworker.__all__ if name != "__version__"]


def api_markdown() -> str:
    out = []
    for name in api_names():
        out.append(f"## `cogworker.{name}` {{#{name}}}\n\n::: cogworker.{name}\n")
    return "\n".join(out)


GENERATORS = {"settings": settings_markdown, "cli": cli_markdown, "api": api_markdown}

# ---- links to the repository's files -----------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
SOURCE = "https://github.com/cogworker-dev/cogworker/blob/main/"
RELATIVE_LINK = re.compile(r"\]\(((?:\.\./)+[^)#\s]+)(#[^)\s]*)?\)")


def _source_links(markdown: str, page_path: str) -> str:
    """A relative link out of docs/ (a test, an app, deploy/RUNBOOK.md) becomes a link to the file on
    GitHub; one to a file that doesn't exist fails the build, as a broken page link does."""
    folder = (ROOT / "docs" / page_path).parent

    def rewrite(match: re.Match[str]) -> str:
        target = (folder / match.group(1)).resolve()
        if target.is_relative_to(ROOT / "docs"):
            return match.group(0)  # a page: MkDocs checks it
        if not target.exists():
            log.warning(f"Doc file '{page_path}' links to '{match.group(1)}', which doesn't exist")
            return match.group(0)
        return f"]({SOURCE}{target.relative_to(ROOT)}{match.group(2) or ''})"

    return RELATIVE_LINK.sub(rewrite, markdown)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    markdown = _source_links(markdown, page.file.src_uri)
    return MARKER.sub(lambda m: GENERATORS[m.group(1)](), markdown)
