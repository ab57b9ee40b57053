"""Full-page screenshots of every page with realistic data, at a wide and a narrow width, into
screenshots/ (gitignored) for people to look at, plus layout checks a screenshot would show:
no horizontal page overflow, no text spilling out of its card, no table scrolling sideways, and the
badges, sparklines, charts and empty states each page is looked at for."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import Client

from smrweb.tracking import services
from tests.browser.conftest import DEFAULT_TIMEOUT_MS
from tests.browser.seed import LONG_RUN_ID, seed
from tests.factories import UserFactory, admin_project

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Content must stay inside its box: a long run id or path may wrap or be clipped with an ellipsis, but
# must never push past its card's edge, and no table may need sideways scrolling at these widths.
OVERFLOW_CHECK = """() => {
  const bad = [];
  const vw = document.documentElement.clientWidth;
  if (document.documentElement.scrollWidth > vw + 1) bad.push(`page scrolls sideways: ${document.documentElement.scrollWidth} > ${vw}`);
  for (const wrap of document.querySelectorAll('.table-wrap')) {
    if (wrap.scrollWidth > wrap.clientWidth + 1) bad.push(`table in "${wrap.closest('.card')?.querySelector('h2')?.textContent}" scrolls sideways: ${wrap.scrollWidth} > ${wrap.clientWidth}`);
  }
  for (const card of document.querySelectorAll('.card, .stat, .alert, .filters')) {
    const box = card.getBoundingClientRect();
    if (box.right > vw + 1) bad.push(`${card.className} ends at ${Math.round(box.right)} > ${vw}`);
    for (const el of card.querySelectorAll('h1, h2, td, th, li, .big, .badge, a, code, span')) {
      const r = el.getBoundingClientRect();
      if (r.width && r.right > box.right + 1) bad.push(`${el.tagName}.${el.className} "${el.textContent.trim().slice(0, 40)}" overflows its ${card.className}`);
    }
  }
  return bad;
}"""


# What each screenshot must show besides fitting its width: the things people look at it for.
EXPECTED = {
    "overview": ['[data-project="dogfight"] svg.spark', '[data-project="dogfight"] .count.warn', '[data-project="dogfight"] .count.bad'],
    "project-dogfight": ["tr[data-run] svg.spark", ".badge-stalled[title]", ".badge-failed[title]", ".badge-warn", "table.leaderboard tr.top"],
    "project-failed-filter": ['tr[data-run="run-c04d17"] .failure-line'],
    "run-running": ["#run-timeline .main-svg", "#budget .forecast", ".budget .budget-part.driver", "table.turns tbody tr", "table.artifacts a.btn",
                    ".timeline .detail.bad", ".timeline .body"],
    "run-failed": [".alert.bad"],
    "run-stalled-downgraded": [".alert.warn", "h1 .badge-stalled", "h1 .badge-warn"],
    "run-queued-empty": [".chart-empty", "td.empty"],
    "overview-no-projects": [".empty-state"],
    "project-empty": ["table.runs td.empty", "table.leaderboard td.empty"],
    "tokens": [".badge-revoked", "button.danger"],
}


def _session_cookie(user, url: str) -> dict:
    client = Client()
    client.force_login(user)
    return {"name": settings.SESSION_COOKIE_NAME, "value": client.cookies[settings.SESSION_COOKIE_NAME].value, "url": url}


def test_screenshots_of_every_page(browser, live_server, alice, bob, carol, screenshot_dir):
    data = seed(alice, bob)
    dogfight = data.projects["dogfight"]
    services.create_api_token(dogfight, name="ci-harness", by=alice)
    old, _ = services.create_api_token(dogfight, name="laptop (old)", by=alice)
    services.revoke_api_token(old, by=alice)
    admin_project("fresh", name="Fresh project", by=carol)
    newcomer = UserFactory(username="dave")  # a member of nothing yet

    shots = [
        ("overview", "/", alice),
        ("project-dogfight", "/projects/dogfight/", alice),
        ("project-optimizer-minimize", "/projects/optimizer/", alice),
        ("project-failed-filter", "/projects/dogfight/?state=failed", alice),
        ("run-running", "/projects/dogfight/runs/run-7f3a2c/", alice),
        ("run-failed", "/projects/dogfight/runs/run-c04d17/", alice),
        ("run-stalled-downgraded", f"/projects/dogfight/runs/{LONG_RUN_ID}/", alice),
        ("run-queued-empty", "/projects/dogfight/runs/run-e8a1f2/", alice),
        ("tokens", "/projects/dogfight/tokens/", alice),
        ("overview-new-user", "/", carol),
        ("overview-no-projects", "/", newcomer),
        ("project-empty", "/projects/fresh/", carol),
        ("not-found", "/projects/dogfight/", carol),
    ]
    problems: dict[str, list[str]] = {}
    for width in (1440, 1000):
        ctx = browser.new_context(base_url=live_server.url, viewport={"width": width, "height": 900},
                                  accept_downloads=True)
        ctx.set_default_timeout(DEFAULT_TIMEOUT_MS)
        try:
            page = ctx.new_page()
            page.goto("/login/")
            page.screenshot(path=screenshot_dir / f"login-{width}.png", full_page=True)
            page.fill("#id_username", "alice")
            page.fill("#id_password", "wrong")
            page.click("button[type=submit]")
            page.wait_for_selector(".form-error")
            page.screenshot(path=screenshot_dir / f"login-error-{width}.png", full_page=True)
            for name, url, user in shots:
                ctx.clear_cookies()
                ctx.add_cookies([_session_cookie(user, live_server.url)])
                page.goto(url)
                page.screenshot(path=screenshot_dir / f"{name}-{width}.png", full_page=True)
                found = page.evaluate(OVERFLOW_CHECK)
                found += [f"nothing matches {sel}" for sel in EXPECTED.get(name, []) if not page.locator(sel).count()]
                if found:
                    problems[f"{name}-{width}"] = found
            # The one-time token display after creating a token through the form.
            ctx.clear_cookies()
            ctx.add_cookies([_session_cookie(alice, live_server.url)])
            page.goto("/projects/dogfight/tokens/")
            page.fill("#id_name", f"arena-uploader-{width}")
            page.click("button:has-text('Create token')")
            page.wait_for_selector("#new-token")
            page.screenshot(path=screenshot_dir / f"tokens-created-{width}.png", full_page=True)
            if found := page.evaluate(OVERFLOW_CHECK):
                problems[f"tokens-created-{width}"] = found
        finally:
            ctx.close()
    assert not problems, "\n".join(f"{shot}: {msg}" for shot, msgs in problems.items() for msg in msgs)
