"""Browser fixtures: one headless Chromium for the session, a fresh context (cookies, storage) per test,
sign-in by session cookie, and small helpers that write tracked data through the services only.

Tests here use pytest-django's `live_server` (a real HTTP server on the test database) and the
Playwright sync API against the system Chromium; they never download a browser.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

from smrweb.stack import chromium
from smrweb.stack.chromium import CHROMIUM, VIEWPORT
from smrweb.tracking import services
from smrweb.tracking.events import parse_events

# Beyond the flags it shares with bench/browser.py: no first-run setup, no QUIC.
EXTRA_CHROMIUM_ARGS = ("--no-first-run", "--disable-quic")
DEFAULT_TIMEOUT_MS = 10_000
# Chromium now and then refuses one capture ("Unable to capture screenshot") and takes the same picture
# when asked again (CI saw it once in ~60 screenshots, after a form post). A screenshot is an artifact,
# not an assertion, so it is asked for again; any other error, or a third refusal, still fails the test.
SCREENSHOT_ATTEMPTS = 3
TRANSIENT_CAPTURE_ERROR = "Unable to capture screenshot"


def _retrying_capture(capture: Callable) -> Callable:
    def screenshot(self, *args, **kwargs):
        from playwright.sync_api import Error

        for attempt in range(1, SCREENSHOT_ATTEMPTS + 1):
            try:
                return capture(self, *args, **kwargs)
            except Error as exc:
                if TRANSIENT_CAPTURE_ERROR not in str(exc) or attempt == SCREENSHOT_ATTEMPTS:
                    raise
                page = getattr(self, "page", self)
                page.wait_for_timeout(200 * attempt)

    return screenshot


@pytest.fixture(scope="session", autouse=True)
def screenshots_retry_transient_capture_errors():
    from playwright.sync_api import Locator, Page

    saved = Page.screenshot, Locator.screenshot
    Page.screenshot = _retrying_capture(Page.screenshot)
    Locator.screenshot = _retrying_capture(Locator.screenshot)
    yield
    Page.screenshot, Locator.screenshot = saved


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for the whole session (launching costs ~1 s)."""
    if not Path(chromium.executable()).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (set SMRWEB_CHROMIUM)")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an asyncio event loop on the main thread from here to the end of the
    # session, which trips Django's async-safety guard for every ORM call made afterwards, here and in
    # test modules that run later. Those calls are plain synchronous code, so the guard is lifted while
    # the browser lives.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as pw:
            browser = chromium.launch(pw, *EXTRA_CHROMIUM_ARGS)
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def context(browser, live_server):
    """A fresh browser context (no cookies) whose relative URLs resolve against the live server."""
    ctx = browser.new_context(base_url=live_server.url, viewport=VIEWPORT, accept_downloads=True)
    ctx.set_default_timeout(DEFAULT_TIMEOUT_MS)
    ctx.set_default_navigation_timeout(DEFAULT_TIMEOUT_MS)
    yield ctx
    ctx.close()


@pytest.fixture
def page(context):
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    assert not errors, f"JavaScript errors on the page: {errors}"


@pytest.fixture
def sign_in(context, live_server) -> Callable:
    """sign_in(user): put a signed-in session cookie for `user` into the test's browser context."""

    def _sign_in(user) -> None:
        client = Client()
        client.force_login(user)
        cookie = client.cookies[settings.SESSION_COOKIE_NAME]
        context.add_cookies(
            [{"name": settings.SESSION_COOKIE_NAME, "value": cookie.value, "url": live_server.url}]
        )

    return _sign_in


# --- data, through the services only ------------------------------------------------------------


def push(project, run_id: str, *events: dict):
    """Ingest events into a run exactly as the REST endpoint does: JSON bytes → parse_events → services."""
    return services.ingest_events(project, run_id, parse_events(json.dumps(list(events)).encode()))


def store(project, run_id: str, path: str, content: bytes, **kwargs):
    artifact, _ = services.store_artifact(project, run_id, path=path, content=io.BytesIO(content), **kwargs)
    return artifact


def turn(
    n: int,
    *,
    actor: str = "driver",
    parent: str | None = None,
    model: str = "gpt-5.4-medium",
    tokens_in: int = 4000,
    tokens_out: int = 600,
    cost_usd: float = 0.011,
    **extra,
) -> dict:
    event = {
        "type": "agent.turn",
        "turn": n,
        "actor": actor,
        "model": model,
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        "cost_usd": cost_usd,
        **extra,
    }
    if parent:
        event["parent_actor"] = parent
    return event


def score(value: float, **extra) -> dict:
    return {"type": "score", "score": value, "harness_id": "bench-v1", **extra}


def state(name: str, **failure) -> dict:
    event = {"type": "state", "state": name}
    if failure:
        event["failure"] = failure
    return event


@pytest.fixture
def screenshot_dir() -> Iterator[Path]:
    out = Path(settings.BASE_DIR) / "screenshots"
    out.mkdir(exist_ok=True)
    yield out
