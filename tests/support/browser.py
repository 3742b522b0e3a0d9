"""A real browser for the Web UI's end-to-end tests: Debian's chromium driven by Playwright.

Playwright never downloads a browser here: it launches /usr/bin/chromium (`make test` installs it,
deploy/ensure-chromium.sh). The flags keep a headless Chromium quiet on a closed network: without the
background-networking ones it keeps trying Google's services and fills the log with refused
connections. Each `launch()` gets a fresh, throwaway profile (Playwright's own temporary user-data-dir).

`Watched` records what the page says went wrong: console errors, uncaught exceptions and
Content-Security-Policy violations (the CSP allows no inline code, so an injected script or handler
would show up here even if it didn't run). `screenshots` writes `<name>-desktop.png` (1280x900) and
`<name>-phone.png` (375x812) under .test-artifacts/screenshots/.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, sync_playwright

from tests.support.paths import ROOT

CHROMIUM = "/usr/bin/chromium"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
SCREENSHOTS = ROOT / ".test-artifacts" / "screenshots"
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 375, "height": 812}
# Playwright's default is 30 s; a page of this UI that takes more than a few seconds is a failure.
TIMEOUT_MS = 10_000

# Runs in every document before its own scripts (through the DevTools protocol, so the page's CSP
# doesn't apply to it): a CSP violation is an event in the page, not a console message on every
# Chromium, so it is recorded here for the test to read.
RECORD_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__cspViolations.push(e.violatedDirective + " " + (e.blockedURI || "inline") + " " + e.sample);
});
"""


def chromium_path() -> str:
    found = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    if found is None:
        raise RuntimeError(
            "chromium not found: run `make test` as root (it installs it) or apt-get install chromium"
        )
    return found


@contextlib.contextmanager
def launched() -> Iterator[Browser]:
    """One headless chromium (share it per test module: a launch costs about a second)."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=list(FLAGS))
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Watched:
    """A page and what went wrong in it."""

    page: Page
    context: BrowserContext
    console_errors: list[str] = field(default_factory=list)

    def violations(self) -> list[str]:
        """CSP violations in the current document (the list starts empty on each navigation)."""
        with contextlib.suppress(Exception):  # a page mid-navigation has no window to ask
            found: list[str] = self.page.evaluate("window.__cspViolations || []")
            return found
        return []

    def problems(self) -> list[str]:
        return [*self.console_errors, *(f"CSP: {v}" for v in self.violations())]


@contextlib.contextmanager
def watched_page(browser: Browser, base_url: str, **context_options: Any) -> Iterator[Watched]:
    """A page in a fresh context (its own cookies and localStorage) at the desktop size."""
    context = browser.new_context(base_url=base_url, viewport=DESKTOP, **context_options)
    context.set_default_timeout(TIMEOUT_MS)
    context.add_init_script(RECORD_VIOLATIONS)
    page = context.new_page()
    watched = Watched(page, context)

    def on_console(message: ConsoleMessage) -> None:
        # A browser asks every site for /favicon.ico on its own; the UI has none, and that 404 is
        # no fault of a page.
        if message.type == "error" and not str(message.location.get("url", "")).endswith("/favicon.ico"):
            watched.console_errors.append(f"console: {message.text} ({message.location.get('url')})")

    page.on("console", on_console)
    page.on("pageerror", lambda error: watched.console_errors.append(f"uncaught: {error}"))
    try:
        yield watched
    finally:
        context.close()


def columns_off_screen(page: Page) -> list[str]:
    """The headings of every table on the page that end past the viewport's right edge (a column
    an operator would have to scroll to), as "table#id: heading"."""
    found: list[str] = page.evaluate(
        """() => Array.from(document.querySelectorAll("table thead th"))
             .filter(th => th.getBoundingClientRect().right > window.innerWidth + 0.5)
             .map(th => (th.closest("table").id || "table") + ": " + th.textContent.trim())"""
    )
    return found


def screenshots(watched: Watched, name: str) -> tuple[Path, Path]:
    """The current page at desktop and phone widths (full page). Asserts that the phone layout
    doesn't scroll sideways and that nothing went wrong in the page."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page = watched.page
    desktop = SCREENSHOTS / f"{name}-desktop.png"
    phone = SCREENSHOTS / f"{name}-phone.png"
    page.set_viewport_size(DESKTOP)
    page.screenshot(path=str(desktop), full_page=True)
    page.set_viewport_size(PHONE)
    width = page.evaluate("document.documentElement.scrollWidth")
    page.screenshot(path=str(phone), full_page=True)
    page.set_viewport_size(DESKTOP)
    assert width <= PHONE["width"] + 1, f"{name}: the page scrolls sideways at 375 px ({width} px wide)"
    assert not watched.problems(), f"{name}: {watched.problems()}"
    return desktop, phone
