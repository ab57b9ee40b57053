"""Fixtures of the API tests."""

from __future__ import annotations

import pytest
from django.urls import NoReverseMatch, reverse

from smrweb.tracking.services import alerts as alert_service


@pytest.fixture(autouse=True)
def alerts_page_url(monkeypatch):
    """`services.send_test` links to the project's Alerts tab (`dashboard:project-alerts`), which the
    dashboard's pages add; until they are in, a test send links where that tab will be rather than
    failing to reverse. Does nothing once the route exists."""
    try:
        reverse("dashboard:project-alerts", args=["x"])
    except NoReverseMatch:

        def fallback(name, urlconf=None, args=None, kwargs=None, **rest):
            if name == "dashboard:project-alerts":
                return f"/projects/{args[0]}/settings/alerts/"
            return reverse(name, urlconf, args, kwargs, **rest)

        monkeypatch.setattr(alert_service, "reverse", fallback)
