"""The Content-Security-Policy in a real browser: every main page is served with it, nothing on them
is refused by it (no `securitypolicyviolation` event, no console report), the plotly charts still draw,
polling still swaps, an htmx POST still carries the CSRF token, and hostile data stays text.

A violation would mean a page needs something the policy forbids (an inline script, eval, a CDN), so
the policy and the pages are checked together."""

from __future__ import annotations

import re

import pytest
import redis
from django.conf import settings
from playwright.sync_api import expect

from smrweb import tasks
from smrweb.tracking import services
from smrweb.tracking.models import KnowledgeKind, Submission, VerificationOutcome
from smrweb.tracking.services import knowledge
from smrweb.tracking.services import submissions as lifecycle
from tests.browser.conftest import push, score, state, store, turn

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HOSTILE = '<script>window.__xss=1</script>"><img src=x onerror="window.__xss=2">{{ 7*7 }}\u202etxt.exe'

WATCH_CSP = """
window.__csp = [];
window.addEventListener("securitypolicyviolation", function (e) {
  window.__csp.push(e.violatedDirective + " " + e.blockedURI + " " + (e.sample || ""));
}, true);
"""


@pytest.fixture
def watched(page):
    """The test's page with CSP violations and CSP console reports collected."""
    page.add_init_script(WATCH_CSP)
    console: list[str] = []
    page.on(
        "console", lambda msg: console.append(msg.text) if "Content Security Policy" in msg.text else None
    )
    page.csp_console = console
    return page


def violations(page) -> list[str]:
    return page.evaluate("window.__csp || []") + page.csp_console


SLOW_MS = 30_000  # plotly.js is 4.7 MB of script to parse: generous on a loaded machine


def visit(page, url: str):
    response = page.goto(url, timeout=SLOW_MS)
    assert response.status == 200, f"{url}: {response.status}"
    policy = response.headers.get("content-security-policy", "")
    assert (
        "script-src 'self'" in policy and "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]
    )
    assert "frame-ancestors 'none'" in policy
    page.wait_for_load_state("networkidle", timeout=SLOW_MS)
    return response


@pytest.fixture
def world(project, alice, bob):
    """A run with a timeline, a metric, a submission with validator output, a second run to compare,
    a knowledge entry — with hostile text wherever agents or people write it."""
    project.name = f"Hill {HOSTILE}"
    project.save()
    artifact = store(project, "r1", f"../../{HOSTILE}.py", b"print('ok')\n")
    push(
        project,
        "r1",
        state("running"),
        *[
            turn(
                i,
                actor="driver" if i % 3 else f"worker {HOSTILE}",
                parent=None if i % 3 else "driver",
                tool_calls=[HOSTILE, {"name": "read_file", "args": {"path": HOSTILE}}],
            )
            for i in range(12)
        ],
        *[{"type": "metric", "key": f"loss {HOSTILE}", "step": i, "value": 1 / (i + 1)} for i in range(30)],
        {"type": "message", "topic": "operator.steer", "body": HOSTILE},
        {"type": "checkpoint", "id": "c1", "label": HOSTILE},
        score(0.2),
        score(0.5, artifact=artifact.blob.sha256, experiment=HOSTILE[:200]),
    )
    push(project, "r2", state("running"), turn(0), score(0.3), score(0.4))
    sub = Submission.objects.get(run__external_id="r1", score=0.5)
    lifecycle.request_verification(sub, by=bob)
    lifecycle.record_verification(
        sub.pk, lifecycle.VerificationResult(VerificationOutcome.FAILED, 1, HOSTILE, "exited 1")
    )
    knowledge.add_entry(
        project, by=bob, kind=KnowledgeKind.FAILED_APPROACH, title=HOSTILE[:200], body=HOSTILE
    )
    services.create_api_token(project, name=HOSTILE[:200], by=alice)
    scenario = project.scenario
    scenario.arena_name, scenario.arena_url = "arena", "javascript:window.__xss=3"
    scenario.save()
    return {"submission": sub, "scenario": scenario}


def test_every_main_page_is_served_under_the_policy_without_a_violation(watched, sign_in, alice, world):
    page = watched
    sign_in(alice)
    sub, scenario = world["submission"], world["scenario"]
    charted = {"/projects/hill/", "/projects/hill/runs/r1/", "/projects/hill/compare/?runs=r1&runs=r2"}
    pages = [
        "/",
        "/projects/hill/",
        "/projects/hill/runs/r1/",
        "/projects/hill/compare/?runs=r1&runs=r2",
        f"/projects/hill/submissions/{sub.pk}/",
        "/projects/hill/review/",
        "/projects/hill/knowledge/",
        "/projects/hill/settings/",
        "/projects/hill/tokens/",
        f"/scenarios/{scenario.key}/",
        "/admin/",
    ]
    for url in pages:
        visit(page, url)
        if url in charted:
            expect(page.locator("[data-plot] .main-svg").first).to_be_attached()
        assert violations(page) == [], f"{url}: {violations(page)}"
        assert page.evaluate("window.__xss") is None, url
        assert page.locator("img[src=x]").count() == 0, url
        assert page.locator('a[href^="javascript:"]').count() == 0, url

    # The run page draws its timeline and its metric; hostile names are text in them, not markup.
    visit(page, "/projects/hill/runs/r1/")
    expect(page.locator("[data-plot] .main-svg")).not_to_have_count(0)
    expect(page.locator("#metric-panel .main-svg").first).to_be_attached()
    assert page.locator("#metric-panel svg a, #metric-panel svg img").count() == 0
    # Bars (the timeline's turns) draw under the policy too; the basic bundle has no WebGL traces.
    page.evaluate("""() => { const d = document.createElement("div"); document.body.appendChild(d);
        return Plotly.newPlot(d, [{type: "bar", x: [1, 2, 3], y: [3, 1, 2]}]).catch(() => null); }""")
    assert violations(page) == []


def test_the_api_docs_render_swagger_ui_under_the_policy(watched, sign_in, alice):
    page = watched
    sign_in(alice)
    visit(page, "/api/docs/")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("smrweb API")
    expect(page.locator(".opblock").first).to_be_visible()
    assert violations(page) == []


def test_sign_in_page_has_the_policy_and_no_violation(watched, alice):
    page = watched
    visit(page, "/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "pw-for-tests-only")
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(r"/$"))
    assert violations(page) == []


def test_polling_still_swaps_under_the_policy(watched, sign_in, alice, project):
    page = watched
    push(project, "live", state("running"), score(0.1))
    sign_in(alice)
    visit(page, "/projects/hill/")
    page.evaluate("window.__smrwebNoReload = true")
    push(project, "live", score(0.9))
    expect(page.locator('tr[data-run="live"] td.num b')).to_have_text("0.9", timeout=12_000)
    assert page.evaluate("window.__smrwebNoReload === true")
    assert violations(page) == []


def test_a_hidden_tab_does_not_poll(watched, sign_in, alice, project):
    """Visibility is checked in smrweb.js now (an hx-trigger filter would need eval)."""
    page = watched
    push(project, "live", state("running"), score(0.1))
    sign_in(alice)
    visit(page, "/projects/hill/")
    page.evaluate("""() => {
        Object.defineProperty(document, "visibilityState", {configurable: true, get: () => "hidden"});
        window.__polls = 0;
        document.addEventListener("htmx:beforeSend", () => window.__polls++);
    }""")
    page.wait_for_timeout(6_500)  # more than one 5 s period
    assert page.evaluate("window.__polls") == 0
    page.evaluate("""() => {
        Object.defineProperty(document, "visibilityState", {configurable: true, get: () => "visible"});
        document.dispatchEvent(new Event("visibilitychange"));
    }""")
    page.wait_for_function("window.__polls > 0", timeout=3_000)  # caught up at once
    assert violations(page) == []


def test_an_htmx_post_carries_the_csrf_token_and_succeeds(
    watched, sign_in, alice, project, monkeypatch, redis_server
):
    """The preflight button is an hx-post; base.html's hx-headers sends the CSRF token with it; the
    fragment it swaps in polls until the report is there."""
    report = {
        "ok": True,
        "worker": "test-worker",
        "checks": [{"name": "validator", "group": "preset", "ok": True, "detail": "found `check.py`"}],
    }

    def worker_answers_at_once(args, **kwargs):  # the report stored where the page polls for it
        key, request_id = args
        with redis.Redis.from_url(settings.REDIS_URL) as client:
            tasks._store(client, request_id, {"scenario": key, "status": "done", "report": report})

    monkeypatch.setattr(tasks.preflight_scenario, "apply_async", worker_answers_at_once)
    page = watched
    sign_in(alice)
    visit(page, f"/scenarios/{project.scenario.key}/")
    posts = []
    page.on("request", lambda r: posts.append(r) if r.method == "POST" else None)
    page.evaluate("window.__smrwebNoReload = true")
    page.get_by_role("button", name="Run preflight").click()
    expect(page.locator("#preflight-report .preflight-verdict")).to_contain_text("all 1 checks passed")
    assert page.evaluate("window.__smrwebNoReload === true"), "the form was submitted without htmx"
    assert posts and posts[0].headers.get("hx-request") == "true" and posts[0].headers.get("x-csrftoken")
    assert violations(page) == []
