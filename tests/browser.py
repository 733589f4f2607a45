"""A real headless browser for the dashboard's tests, scripts and benchmarks: Debian's chromium driven by Playwright
(never a browser Playwright would download). Without chromium the tests skip, saying how to install it; in CI
(``CI`` set) they fail instead, since .ci/run installs it."""

from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM = os.environ.get("FOREWARN_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",  # CI runs as root, where chromium's sandbox cannot start
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--enable-precise-memory-info",
]


def chromium_or_skip() -> str:
    if os.path.exists(CHROMIUM) or shutil.which(CHROMIUM):
        return CHROMIUM
    message = f"no chromium at {CHROMIUM}: apt-get install -y chromium (or set FOREWARN_CHROMIUM)"
    if os.environ.get("CI"):
        pytest.fail(message + "; .ci/run should have installed it")
    pytest.skip(message)


def launch(playwright, executable: str = CHROMIUM):
    return playwright.chromium.launch(executable_path=executable, args=ARGS)
