"""The integration pages (docs/integrations/) show code the tests run: a code block under a
`<!-- from PATH ... -->` comment must appear, as written, in that file, so an example can't drift
from what tests/e2e/integrations/ and the typed-argument tests execute."""

from __future__ import annotations

import re

from tests.support.paths import ROOT

DOCS = ROOT / "docs" / "integrations"
SOURCED_BLOCK = re.compile(r"<!-- from (\S+)[^>]*-->\n```python\n(.*?)```", re.S)


def test_every_sourced_example_is_in_the_file_it_names() -> None:
    pages = sorted(DOCS.glob("*.md"))
    assert {p.name for p in pages} >= {"django.md", "fastapi.md", "typed-arguments.md"}
    checked = 0
    for page in pages:
        for path, block in SOURCED_BLOCK.findall(page.read_text()):
            source = (ROOT / path).read_text()
            assert block in source, f"{page.name}: the example said to be from {path} is not in it"
            checked += 1
    assert checked >= 4
