"""The docs site's reference pages (docs/reference/), generated at build time by docs/hooks/reference.py,
cover what they claim to: every setting with a description, every subcommand of both commands, every
name in `cogworker.__all__`. A setting, a verb or a public name added without these fails here, not
on a reader."""

from __future__ import annotations

import argparse
import importlib.util
from types import ModuleType

from cogworker.settings import Settings
from cogworker.settings_fields import FIELD_NAMES
from tests.support.paths import ROOT


def hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "docs" / "hooks" / "reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_setting_has_a_description_on_the_settings_page() -> None:
    reference = hooks()
    descriptions = reference.setting_descriptions()
    assert [name for name in FIELD_NAMES if not descriptions.get(name, "").strip()] == []
    page = reference.settings_markdown()
    for name in FIELD_NAMES:
        assert f"`COGWORKER_{name.upper()}`" in page
        assert descriptions[name] in page


def test_every_check_of_a_setting_is_said_on_the_page() -> None:
    checks = set(Settings.__pydantic_decorators__.field_validators)
    assert checks == set(hooks().VALIDATOR_RULES)


def test_the_cli_page_covers_every_subcommand_and_option() -> None:
    reference = hooks()
    page = reference.cli_markdown()
    commands = {}
    for prog, parser in reference.parsers().items():
        commands |= reference.subcommands(parser, prog)
    # Both commands, every verb and every nested verb (`cogworker dead retry`).
    assert {"cogworker", "cogworker-swarm", "cogworker run", "cogworker web", "cogworker dead retry"} <= set(
        commands
    )
    for command, parser in commands.items():
        assert f"`{command}`" in page, command  # its section, or an alias's line in it
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue  # -h on every command, said once on the page's top
            for option in action.option_strings:
                assert f"`{option}`" in page, f"{command} {option}"


def test_the_api_page_covers_every_public_name() -> None:
    import cogworker

    page = hooks().api_markdown()
    missing = [
        name for name in cogworker.__all__ if name != "__version__" and f"::: cogworker.{name}\n" not in page
    ]
    assert missing == []
