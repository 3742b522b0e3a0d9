"""CHANGELOG.md keeps the Keep a Changelog form (the docs site includes it as its changelog page): an
Unreleased section first, then each release as `## [X.Y.Z] - YYYY-MM-DD`, newest first, the newest
being the version the package carries, each with a link at the bottom."""

from __future__ import annotations

import re

from tests.support.paths import ROOT

CHANGELOG = ROOT / "CHANGELOG.md"
SECTION = re.compile(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", re.M)
GROUPS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def package_version() -> str:
    found = re.search(r'^__version__ = "([^"]+)"$', (ROOT / "cogworker" / "__init__.py").read_text(), re.M)
    assert found is not None, "cogworker/__init__.py has no __version__ literal"
    return found.group(1)


def test_sections_are_unreleased_then_releases_newest_first() -> None:
    text = CHANGELOG.read_text()
    sections = SECTION.findall(text)
    assert sections[0] == ("Unreleased", ""), "the first section must be ## [Unreleased]"
    releases = sections[1:]
    assert releases, "no release section"
    assert all(date for _, date in releases), f"a release without its date: {releases}"
    assert releases[0][0] == package_version(), "the newest release is not the package's __version__"
    dates = [date for _, date in releases]
    assert dates == sorted(dates, reverse=True), "releases are not newest first"
    for name, _ in sections:
        assert re.search(rf"^\[{re.escape(name)}\]: https://", text, re.M), f"no link for [{name}]"


def test_changes_are_grouped_under_keep_a_changelog_headings() -> None:
    groups = set(re.findall(r"^### (.+)$", CHANGELOG.read_text(), re.M))
    assert groups <= GROUPS, f"groups Keep a Changelog doesn't name: {sorted(groups - GROUPS)}"
