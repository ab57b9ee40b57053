"""The screenshot retry the browser conftest installs: Chromium's transient refusal is asked again, any
other error (or a refusal that does not go away) still fails."""

from __future__ import annotations

import pytest
from playwright.sync_api import Error

from tests.browser.conftest import SCREENSHOT_ATTEMPTS, _retrying_capture


class FakePage:
    def __init__(self, failures: list[str]):
        self.failures = failures
        self.calls = 0
        self.waited: list[int] = []

    def capture(self, path=None):
        self.calls += 1
        if self.failures:
            raise Error(self.failures.pop(0))
        return b"png"

    def wait_for_timeout(self, ms):
        self.waited.append(ms)


screenshot = _retrying_capture(FakePage.capture)


def test_a_transient_refusal_is_asked_again():
    page = FakePage(["Protocol error (Page.captureScreenshot): Unable to capture screenshot"])
    assert screenshot(page, path="x.png") == b"png"
    assert page.calls == 2 and page.waited == [200]


def test_a_refusal_that_does_not_go_away_fails():
    page = FakePage(["Unable to capture screenshot"] * SCREENSHOT_ATTEMPTS)
    with pytest.raises(Error, match="Unable to capture"):
        screenshot(page)
    assert page.calls == SCREENSHOT_ATTEMPTS


def test_any_other_error_fails_at_once():
    page = FakePage(["Cannot take screenshot with 0 width."])
    with pytest.raises(Error, match="0 width"):
        screenshot(page)
    assert page.calls == 1
