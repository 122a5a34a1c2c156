"""The web demo in a real browser: the demo's host, agent and store behind the real Slack app in
HTTP mode, the stand-in's channel page, and Debian's Chromium driven by Playwright (its own
browser download is not used: ``executable_path`` is the system's ``chromium``).

These tests run in ``make test-web`` only (marker ``web``), which installs Chromium and
Playwright first; ``KIMI_WEB_SCREENSHOTS=DIR`` keeps the screenshots there (``docs/slack/`` is
where the README's pictures come from), else they go to the test's temporary folder.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.demo._stack import demo_stack
from bot.demo.web import WebDemo, web_demo
from bot.store import Store

CHROMIUM = "/usr/bin/chromium"
# Without these Chromium reaches for Google's hosts at start and in the background; this
# machine has no network beyond the package registries.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDemo]:
    """The web demo, one per module: a simulated host at a quick time scale."""
    root = tmp_path_factory.mktemp("web-demo")
    with (
        demo_stack(root, time_scale=0.02) as stack,
        Store(stack.db_url) as store,
        web_demo(stack, store) as running,
    ):
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Debian's Chromium through Playwright; a clear failure when either is missing."""
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"{CHROMIUM} is missing: make test-web installs Debian's chromium package")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots go: ``KIMI_WEB_SCREENSHOTS`` when set, else a temporary folder."""
    given = os.environ.get("KIMI_WEB_SCREENSHOTS")
    folder = Path(given) if given else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder
