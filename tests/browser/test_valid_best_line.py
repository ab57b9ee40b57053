"""Issue 33, P0-A in a real browser: the walkthrough's steps replayed through the push API — 3.30 whose
artifact fails validation (invalid), 3.45 (verified), 3.80 — then the run page: the plotted best-so-far
line must be 3.45 like the BEST card and the regression banner (it was flat at the invalid 3.30), and the
invalid point must be drawn hollow with "invalid" on hover, not like the others."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from smrweb.tracking import services
from smrweb.tracking.models import Direction, Role, Submission
from tests.browser.seed import record_verdict
from tests.factories import admin_project

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def plotted(page, name: str) -> dict:
    """The trace `name` as Plotly holds it on the run timeline (what is drawn, not what was sent)."""
    return page.evaluate(
        "(name) => { const t = document.getElementById('run-timeline').data.find(t => t.name === name);"
        " return t ? {x: t.x.slice(), y: t.y.slice(), symbol: t.marker && t.marker.symbol} : null; }",
        name,
    )


@pytest.mark.parametrize("width", [1440, 390])
def test_p0a_the_best_so_far_line_skips_the_invalid_score(page, context, sign_in, alice, bob, width):
    page.set_viewport_size({"width": width, "height": 900})
    scenario = services.create_scenario(
        key="optimizer", name="Optimizer", direction=Direction.MINIMIZE, score_metric="val_loss"
    )
    project = admin_project("demo-optimizer", scenario=scenario, by=alice)
    services.add_member(project, bob, role=Role.REVIEWER)
    services.update_project(project, regression_threshold=0.15, by=alice)
    token = services.create_api_token(project, name="ux-walkthrough", by=alice)[1]
    events = "/api/v1/projects/demo-optimizer/runs/ux-regress-1/events"

    def push(*batch: dict) -> None:
        answer = context.request.post(events, headers={"Authorization": f"Bearer {token}"}, data=list(batch))
        assert answer.ok, answer.text()

    # 1. 3.30 with an optimizer.py that has no step(): its validation fails → invalid.
    push({"type": "state", "state": "running"}, {"type": "score", "score": 3.30, "id": "s1"})
    record_verdict(Submission.objects.get(score=3.30), bob, passed=False)
    # 2. 3.45, verified.
    push(
        {"type": "agent.turn", "turn": 1, "cost_usd": 0.02, "tokens_in": 8000},
        {"type": "score", "score": 3.45, "id": "s2"},
    )
    record_verdict(Submission.objects.get(score=3.45), bob, passed=True)
    # 3. 3.80: a regression against 3.45.
    push(
        {"type": "agent.turn", "turn": 2, "cost_usd": 0.02, "tokens_in": 8000},
        {"type": "score", "score": 3.80, "id": "s3"},
    )
    assert Submission.objects.get(score=3.30).status == "invalid"

    sign_in(alice)
    page.goto("/projects/demo-optimizer/runs/ux-regress-1/")
    expect(page.locator("#run-timeline .main-svg").first).to_be_visible()
    expect(page.locator('[data-stat="best"]')).to_have_text("3.45")
    expect(page.locator(".alert.regression")).to_contain_text("best 3.45")

    best = plotted(page, "best so far")
    assert best is not None and best["y"] == [3.45, 3.45], best  # was [3.3, 3.3]
    void = plotted(page, "not counted")
    assert void is not None and void["y"] == [3.3] and void["symbol"] == "circle-open", void
    counted = next(
        t
        for t in page.evaluate("document.getElementById('run-timeline').data.map(t => ({n: t.name, y: t.y}))")
        if t["n"] == scenario.score_metric
    )
    assert counted["y"] == [3.45, 3.8]

    # The hollow point says why on hover.
    index = page.evaluate(
        "document.getElementById('run-timeline').data.findIndex(t => t.name === 'not counted')"
    )
    page.evaluate(
        "(i) => Plotly.Fx.hover(document.getElementById('run-timeline'), [{curveNumber: i, pointNumber: 0}])",
        index,
    )
    hover = page.locator("#run-timeline .hoverlayer .hovertext").first
    expect(hover).to_contain_text("invalid: not counted")
    # Efficiency starts at the first valid score: no −3/$ from the invalid 3.30.
    expect(page.locator('[data-stat="efficiency"]')).not_to_contain_text("−")
