"""Full-page screenshots of every page with realistic data, at 1440, 1000 and 390 px (phone) in light
and at 1440 and 390 in dark (prefers-color-scheme), into screenshots/ (gitignored) for people to look
at, plus layout checks a screenshot would show: no horizontal page overflow, no text spilling out of
its card, no table scrolling sideways (on a phone: only inside its card), no title squeezed to a
letter per line, no word broken inside, the phone menu, dark backgrounds and charts, and the badges,
sparklines, charts and empty states each page is looked at for."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
from django.conf import settings
from django.test import Client

from smrweb.tracking import services
from smrweb.tracking.services import submissions as lifecycle
from tests.browser.conftest import DEFAULT_TIMEOUT_MS, push, turn
from tests.browser.seed import LONG_RUN_ID, P0A_RUN_ID, seed, seed_p0a
from tests.factories import UserFactory, admin_project

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Content must stay inside its box: a long run id or path may wrap or be clipped with an ellipsis, but
# must never push past its card's edge. At desktop widths no table may need sideways scrolling; on a
# phone (390 px) a wide table scrolls inside its card (its cells are then clipped by it, not checked),
# but the document itself never scrolls sideways, and a title never shrinks to a letter per line.
OVERFLOW_CHECK = """(phone) => {
  const bad = [];
  const vw = document.documentElement.clientWidth;
  const docWidth = document.documentElement.scrollWidth;
  if (docWidth > vw + 1) bad.push(`page scrolls sideways: ${docWidth} > ${vw}`);
  for (const wrap of document.querySelectorAll('.table-wrap')) {
    const title = wrap.closest('.card')?.querySelector('h2')?.textContent;
    if (!phone && wrap.scrollWidth > wrap.clientWidth + 1) {
      bad.push(`table in "${title}" scrolls sideways: ${wrap.scrollWidth} > ${wrap.clientWidth}`);
    }
    if (phone && getComputedStyle(wrap).overflowX === 'visible') bad.push('a .table-wrap does not scroll');
  }
  for (const card of document.querySelectorAll('.card, .stat, .alert, .filters')) {
    const box = card.getBoundingClientRect();
    if (box.right > vw + 1) bad.push(`${card.className} ends at ${Math.round(box.right)} > ${vw}`);
    for (const el of card.querySelectorAll('h1, h2, td, th, li, .big, .badge, a, code, span')) {
      if (phone && el.closest('.table-wrap')) continue;
      const r = el.getBoundingClientRect();
      const what = `${el.tagName}.${el.className} "${el.textContent.trim().slice(0, 40)}"`;
      if (r.width && r.right > box.right + 1) bad.push(`${what} overflows its ${card.className}`);
    }
  }
  for (const h of document.querySelectorAll('h1')) {
    const text = h.textContent.trim();
    const width = Math.round(h.getBoundingClientRect().width);
    if (text.length > 6 && width < 120) bad.push(`title "${text.slice(0, 30)}" squeezed to ${width} px`);
  }
  // A label or heading broken inside a word ("DRIVER INFERENC E"): a word wider than its line.
  for (const el of document.querySelectorAll('.label, .stat .muted, h1, h2, th')) {
    if (el.closest('.table-wrap') && phone) continue;
    const range = document.createRange();
    for (const node of el.childNodes) {
      if (node.nodeType !== 3) continue;
      let i = 0;
      for (const word of node.textContent.split(/([\\s-]+)/)) {
        if (word.trim()) {
          range.setStart(node, i); range.setEnd(node, i + word.length);
          if (range.getClientRects().length > 1) {
            bad.push(`"${word}" breaks across lines in ${el.tagName}.${el.className}`);
          }
        }
        i += word.length;
      }
    }
  }
  return bad;
}"""

# Dark pages: a dark background, light text, and charts drawn on the dark panel with light ink.
DARK_CHECK = """() => {
  const lum = (css) => {
    const m = css.match(/[\\d.]+/g).map(Number);
    return (0.2126 * m[0] + 0.7152 * m[1] + 0.0722 * m[2]) / 255;
  };
  const bad = [];
  const bg = getComputedStyle(document.documentElement).backgroundColor;
  const ink = getComputedStyle(document.body).color;
  if (lum(bg) > 0.2) bad.push(`background ${bg} is not dark`);
  if (lum(ink) < 0.7) bad.push(`text ${ink} is not light`);
  for (const card of document.querySelectorAll('.card')) {
    const c = getComputedStyle(card).backgroundColor;
    if (lum(c) > 0.2) { bad.push(`a card is ${c}`); break; }
  }
  for (const plot of document.querySelectorAll('[data-plot]')) {
    const full = plot._fullLayout;
    if (!full) continue;
    if (lum(full.plot_bgcolor) > 0.2) bad.push(`chart ${plot.id} plots on ${full.plot_bgcolor}`);
    if (lum(full.font.color) < 0.7) bad.push(`chart ${plot.id} writes in ${full.font.color}`);
  }
  return bad;
}"""

# On a phone the nav is a menu button; its links show when it is opened, and fit the screen.
NAV_CHECK = """() => {
  const toggle = document.querySelector('[data-nav-toggle]');
  const nav = document.getElementById('topnav');
  if (!toggle || !nav) return ['no menu button or nav'];
  const bad = [];
  if (!toggle.offsetParent) bad.push('the menu button is hidden');
  if (nav.offsetParent) bad.push('the nav shows before the menu is opened');
  return bad;
}"""


BODY_PROMPT = [
    {
        "role": "system",
        "content": "You train a policy for the Dogfight arena; keep the ONNX under 250k params.",
    },
    {
        "role": "user",
        "content": "Elo 1069 (best 1076). Try a wider first layer; <b>do not</b> touch the validator.",
    },
]
BODY_RESPONSE = "Widening layer 1 to 96 units and re-exporting submission/policy.onnx.\n" * 3

# What each screenshot must show besides fitting its width: the things people look at it for.
EXPECTED = {
    "overview": [
        '[data-project="dogfight"] svg.spark',
        '[data-project="dogfight"] .count.warn',
        '[data-project="dogfight"] .count.bad',
    ],
    "project-dogfight": [
        "tr[data-run] svg.spark",
        ".badge-stalled[title]",
        ".badge-failed[title]",
        ".badge-warn",
        "table.leaderboard tr.top",
    ],
    "project-failed-filter": ['tr[data-run="run-c04d17"] .failure-line'],
    "run-running": [
        "#run-timeline .main-svg",
        "#budget .forecast",
        ".budget .budget-part.driver",
        "table.turns tbody tr",
        "table.artifacts a.btn",
        ".timeline .detail.bad",
        ".timeline .body",
    ],
    "run-failed": [".alert.bad"],
    "run-stalled-downgraded": [".alert.warn", "h1 .badge-stalled", "h1 .badge-warn"],
    "run-queued-empty": [".chart-empty", "td.empty"],
    "run-invalid-score-hollow": ['#run-timeline .legendtext:has-text("not counted")'],
    "overview-no-projects": [".empty-state"],
    "project-empty": ["table.runs td.empty", "table.leaderboard td.empty"],
    "tokens": [".badge-revoked", "button.danger"],
    "review-queue": ["form[data-bulk-form]", "input[data-bulk-all]"],
    "submission-approval-1-of-2": [
        '[data-approvals="1/2"]',
        "button.btn.primary:disabled",
        "[data-approve-refused]",
    ],
}


def _session_cookie(user, url: str) -> dict:
    client = Client()
    client.force_login(user)
    return {
        "name": settings.SESSION_COOKIE_NAME,
        "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
        "url": url,
    }


# The widths and colour schemes a new state is looked at in: desktop and phone, light and dark.
WIDTHS_AND_SCHEMES = ((1440, "light"), (390, "light"), (1440, "dark"), (390, "dark"))


@contextmanager
def page_at(browser, live_server, user, width: int, scheme: str):
    """A page of a context of its own at this width and colour scheme, signed in as `user` (None: not
    signed in), closed when the block ends, even when it fails."""
    ctx = browser.new_context(
        base_url=live_server.url,
        viewport={"width": width, "height": 844 if width < 600 else 900},
        color_scheme=scheme,
    )
    ctx.set_default_timeout(DEFAULT_TIMEOUT_MS)
    try:
        if user is not None:
            ctx.add_cookies([_session_cookie(user, live_server.url)])
        yield ctx.new_page()
    finally:
        ctx.close()


def test_screenshots_of_every_page(browser, live_server, alice, bob, carol, screenshot_dir):
    data = seed(alice, bob)
    seed_p0a(data.projects["optimizer"], alice)
    dogfight = data.projects["dogfight"]
    services.create_api_token(dogfight, name="ci-harness", by=alice)
    old, _ = services.create_api_token(dogfight, name="laptop (old)", by=alice)
    services.revoke_api_token(old, by=alice)
    admin_project("fresh", name="Fresh project", by=carol)
    # A turn with its prompt and response (captured), opened in the turn detail below.
    services.update_project(dogfight, by=alice, capture_turn_bodies=True)
    push(
        dogfight,
        "run-7f3a2c",
        turn(9001, prompt=BODY_PROMPT, response=BODY_RESPONSE, tool_calls=["run_harness"]),
    )
    newcomer = UserFactory(username="dave")  # a member of nothing yet
    # Two people must approve (issue 33): bob gave the first approval of one verified submission.
    services.update_project(dogfight, require_second_reviewer=True, by=alice)
    half = dogfight.submissions.filter(status="verified").order_by("-score").first()
    lifecycle.review(half, by=bob, verdict="approve", comment="the warmup change is sound")

    shots = [
        ("overview", "/", alice),
        ("project-dogfight", "/projects/dogfight/", alice),
        ("project-optimizer-minimize", "/projects/optimizer/", alice),
        ("project-failed-filter", "/projects/dogfight/?state=failed", alice),
        ("run-running", "/projects/dogfight/runs/run-7f3a2c/", alice),
        ("run-failed", "/projects/dogfight/runs/run-c04d17/", alice),
        ("run-stalled-downgraded", f"/projects/dogfight/runs/{LONG_RUN_ID}/", alice),
        ("run-queued-empty", "/projects/dogfight/runs/run-e8a1f2/", alice),
        # Issue 33 P0-A: an invalid score drawn hollow, the best-so-far line at the valid 3.45.
        ("run-invalid-score-hollow", f"/projects/optimizer/runs/{P0A_RUN_ID}/", alice),
        ("tokens", "/projects/dogfight/tokens/", alice),
        ("overview-new-user", "/", carol),
        ("overview-no-projects", "/", newcomer),
        ("project-empty", "/projects/fresh/", carol),
        ("not-found", "/projects/dogfight/", carol),
        ("review-queue", "/projects/dogfight/review/", alice),
        ("submission-approval-1-of-2", f"/projects/dogfight/submissions/{half.pk}/", bob),
        ("knowledge", "/projects/dogfight/knowledge/", alice),
        ("compare", "/projects/dogfight/compare/?runs=run-7f3a2c&runs=run-5b91e0&runs=run-c04d17", alice),
        ("settings", "/projects/dogfight/settings/", alice),
        ("members", "/projects/dogfight/members/", alice),
        ("preferences", "/preferences/", alice),
    ]
    problems: dict[str, list[str]] = {}
    # Light at three widths; dark (prefers-color-scheme) at the desktop and phone widths.
    for width, scheme in ((1440, "light"), (1000, "light"), (390, "light"), (1440, "dark"), (390, "dark")):
        phone = width < 600
        suffix = f"{width}" if scheme == "light" else f"{width}-dark"
        ctx = browser.new_context(
            base_url=live_server.url,
            viewport={"width": width, "height": 900 if not phone else 844},
            accept_downloads=True,
            color_scheme=scheme,
        )
        ctx.set_default_timeout(DEFAULT_TIMEOUT_MS)
        try:
            page = ctx.new_page()
            page.goto("/login/")
            page.screenshot(path=screenshot_dir / f"login-{suffix}.png", full_page=True)
            page.fill("#id_username", "alice")
            page.fill("#id_password", "wrong")
            page.click("button[type=submit]")
            page.wait_for_selector(".form-error")
            page.screenshot(path=screenshot_dir / f"login-error-{suffix}.png", full_page=True)
            for name, url, user in shots:
                ctx.clear_cookies()
                ctx.add_cookies([_session_cookie(user, live_server.url)])
                page.goto(url)
                if page.locator("[data-plot]").count():
                    page.wait_for_selector("[data-plot] .main-svg")
                page.screenshot(path=screenshot_dir / f"{name}-{suffix}.png", full_page=True)
                found = page.evaluate(OVERFLOW_CHECK, phone)
                found += [
                    f"nothing matches {sel}"
                    for sel in EXPECTED.get(name, [])
                    if not page.locator(sel).count()
                ]
                if phone and name != "not-found":
                    found += page.evaluate(NAV_CHECK)
                if scheme == "dark":
                    found += page.evaluate(DARK_CHECK)
                if found:
                    problems[f"{name}-{suffix}"] = found
            if phone:
                # The menu opens, every link fits on the screen, and the page still does not scroll sideways.
                page.goto("/projects/dogfight/")
                page.click("[data-nav-toggle]")
                for link in ("Projects", "API", "Preferences", "Sign out"):
                    box = page.locator("#topnav").get_by_text(link, exact=False).first.bounding_box()
                    if not box or box["x"] < 0 or box["x"] + box["width"] > width:
                        problems.setdefault(f"menu-{suffix}", []).append(f"{link} is not on screen: {box}")
                page.screenshot(path=screenshot_dir / f"menu-open-{suffix}.png")
                if found := page.evaluate(OVERFLOW_CHECK, phone):
                    problems[f"menu-open-{suffix}"] = found
            # A turn's detail with its prompt expanded (walkthrough P2-11).
            page.goto("/projects/dogfight/runs/run-7f3a2c/")
            page.locator('table.turns tr[data-turn="9001"] button.turn-link').click()
            page.locator('#turn-detail details[data-body="prompt"] summary').click()
            page.wait_for_selector('#turn-detail details[data-body="prompt"] pre.body-text')
            page.screenshot(path=screenshot_dir / f"run-turn-bodies-{suffix}.png", full_page=True)
            if found := page.evaluate(OVERFLOW_CHECK, phone):
                problems[f"run-turn-bodies-{suffix}"] = found
            # The one-time token display after creating a token through the form.
            ctx.clear_cookies()
            ctx.add_cookies([_session_cookie(alice, live_server.url)])
            page.goto("/projects/dogfight/tokens/")
            page.fill("#id_name", f"arena-uploader-{suffix}")
            page.click("button:has-text('Create token')")
            page.wait_for_selector("#new-token")
            page.screenshot(path=screenshot_dir / f"tokens-created-{suffix}.png", full_page=True)
            if found := page.evaluate(OVERFLOW_CHECK, phone):
                problems[f"tokens-created-{suffix}"] = found
        finally:
            ctx.close()
    assert not problems, "\n".join(f"{shot}: {msg}" for shot, msgs in problems.items() for msg in msgs)
