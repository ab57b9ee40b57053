"""The tree of attempts in a browser (issue 39 item 1): a climb of launches with side branches, an SMR branch,
MLflow nested runs, a rollback, failed and regressed runs; the path to the best highlighted, dead branches
dimmed, a subtree closed and opened, the search box narrowing it, a click opening the run; screenshots at
1440 px (light) and 390 px (dark), with the overflow and dark-mode checks of test_screenshots."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from smrweb.tracking import services
from smrweb.tracking.models import Run
from smrweb.tracking.services import rollbacks
from tests.browser.test_screenshots import DARK_CHECK, OVERFLOW_CHECK, page_at
from tests.tracking.test_tree import ingest, launched, scored

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def climb(project, bob) -> None:
    """A climb: baseline → three iterations on the best, with side attempts that failed or regressed; an
    SMR branch from a checkpoint; a sweep of MLflow nested runs; a rollback; a long side subtree."""
    services.update_project(project, rollback_webhook_url="https://hooks.example/hill")
    ingest(project, "baseline", {"type": "state", "id": "st", "state": "running"},
           {"type": "checkpoint", "id": "ck-1", "label": "baseline tuned"})  # fmt: skip
    scored(project, "baseline", 0.41, by=bob)
    line = "baseline"
    for i, value in enumerate((0.52, 0.61, 0.74), start=1):
        nxt = f"iter-{i}"
        launched(project, bob, line, nxt)
        scored(project, nxt, value, by=bob)
        ingest(project, nxt, {"type": "agent.turn", "turn": 1, "actor": "driver", "model": "gpt-5.4-medium",
                              "tokens_in": 4000 * i, "tokens_out": 600, "cost_usd": 0.35 * i})  # fmt: skip
        side = f"iter-{i}-alt"
        launched(project, bob, line, side)
        if i % 2:
            ingest(
                project, side, {"type": "state", "id": "f", "state": "failed", "failure": {"family": "oom"}}
            )
        else:
            scored(project, side, value - 0.2, by=bob)
        line = nxt
    for j in range(1, 15):  # a long side subtree: closed at first
        launched(project, bob, "iter-1-alt" if j == 1 else f"explore-{j - 1}", f"explore-{j}")
    ingest(
        project, "smr-branch", {"type": "checkpoint", "id": "ck-b1", "parent": "ck-1", "label": "branched"}
    )
    scored(project, "smr-branch", 0.45, by=bob)
    ingest(project, "sweep", {"type": "state", "id": "st", "state": "done"})
    for lr in ("0.1", "0.01"):
        ingest(project, f"sweep-lr-{lr}", {"type": "state", "id": "st", "state": "done"})
        nested = Run.objects.get(external_id=f"sweep-lr-{lr}")
        services.set_tag(nested, key="mlflow.parentRunId", value="sweep", by=bob)
    target = scored(project, "iter-2", 0.63, by=bob)
    rollbacks.request_rollback(by=bob, reason="went back", submission=target)


def test_the_tree_at_1440_light_and_390_dark(browser, live_server, project, alice, bob, screenshot_dir):
    climb(project, bob)
    with page_at(browser, live_server, alice, 1440, "light") as page:
        errors = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto("/projects/hill/")
        page.locator("a[data-follow-query]", has_text="Tree of attempts").click()
        expect(page).to_have_url(re.compile(r"/projects/hill/tree/"))
        tree = page.locator("#tree")
        expect(tree.locator("h2")).to_contain_text("25 runs")
        best = tree.locator("[data-best-path]")
        expect(best).to_have_count(4)  # baseline → iter-1 → iter-2 → iter-3
        assert [best.nth(i).get_attribute("data-run") for i in range(4)] == [
            "baseline", "iter-1", "iter-2", "iter-3"
        ]  # fmt: skip
        expect(tree.locator('[data-run="iter-1-alt"]')).to_have_attribute("data-dead", "failed")
        expect(tree.locator('[data-run="iter-2-alt"]')).to_have_attribute("data-dead", "regressed")
        assert (
            float(tree.locator('[data-run="iter-1-alt"]').evaluate("e => getComputedStyle(e).opacity")) < 0.6
        )
        expect(tree.locator('[data-run="smr-branch"] .edge-branch')).to_have_text("branch")
        expect(tree.locator('[data-run="sweep-lr-0.1"] .edge-nested')).to_have_text("nested")
        expect(tree.locator('[data-run="iter-2"] .marker-rollback')).to_contain_text("to submission #")
        # The long side subtree starts closed; "Open all" opens it, "Close all" closes every one.
        explore = tree.locator('[data-run="explore-14"]')
        expect(explore).to_be_hidden()
        tree.get_by_role("button", name="Open all").click()
        expect(explore).to_be_visible()
        assert not page.evaluate(OVERFLOW_CHECK, False)
        page.screenshot(path=str(screenshot_dir / "tree-1440-light.png"), full_page=True)
        tree.get_by_role("button", name="Close all").click()
        expect(tree.locator('[data-run="iter-1"]')).to_be_hidden()
        tree.locator("summary").first.click()  # one subtree opened by hand
        expect(tree.locator('[data-run="iter-1"]')).to_be_visible()
        # The search box narrows the tree (htmx; the address bar follows), with the runs it comes from.
        page.locator("#runs-filter input[name=q]").fill("explore-3")
        expect(tree.locator("h2")).to_contain_text("1 of 25 runs match", timeout=5000)
        tree = page.locator("#tree")
        expect(tree.locator('[data-run="explore-3"]')).not_to_have_class(re.compile(r"\bcontext\b"))
        expect(tree.locator('[data-run="baseline"]')).to_have_class(re.compile(r"\bcontext\b"))
        # iter-1-alt, explore-1 and explore-2 only lead on to it: one line, its ends linked.
        fold = tree.locator('li.tree-fold[data-folded="3"]')
        expect(fold).to_contain_text("iter-1-alt to explore-2")
        expect(tree.locator('[data-run="iter-3"]')).to_have_count(0)
        expect(page).to_have_url(re.compile(r"q=explore-3"))
        page.screenshot(path=str(screenshot_dir / "tree-1440-light-search.png"), full_page=True)
        # The tab back to the table keeps the filter; a click on a run opens it.
        tree.locator('[data-run="explore-3"] a.tree-run').click()
        expect(page).to_have_url(re.compile(r"/projects/hill/runs/explore-3/$"))
        assert not errors, errors

    with page_at(browser, live_server, alice, 390, "dark") as page:
        page.goto("/projects/hill/tree/")
        tree = page.locator("#tree")
        expect(tree.locator("[data-best-path]")).to_have_count(4)
        assert not page.evaluate(OVERFLOW_CHECK, True)
        assert not page.evaluate(DARK_CHECK)
        page.screenshot(path=str(screenshot_dir / "tree-390-dark.png"), full_page=True)
