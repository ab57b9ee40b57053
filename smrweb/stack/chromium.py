"""The headless Chromium that the browser tests (tests/browser) and bench/browser.py drive with Playwright:
the system browser (never a downloaded one), the flags it is launched with and the window pages are laid out
in. No Django here: bench/browser.py imports it before Django is set up."""

from __future__ import annotations

import os
import shutil

CHROMIUM = os.environ.get("SMRWEB_CHROMIUM", "/usr/bin/chromium")
# No sandbox (containers), no GPU, nothing fetched or updated in the background.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 900}


def executable() -> str:
    """Where CHROMIUM is: found on PATH when it is a bare name, else the path as given (it may not exist)."""
    return shutil.which(CHROMIUM) or CHROMIUM


def launch(playwright, *extra_args: str):
    """A headless Chromium from a Playwright (sync) instance, with CHROMIUM_ARGS and `extra_args`."""
    return playwright.chromium.launch(
        executable_path=executable(), headless=True, args=[*CHROMIUM_ARGS, *extra_args]
    )
