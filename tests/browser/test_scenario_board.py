"""The scenario page's leaderboard across projects in a browser (issue 39, item 3): each readable project's
best verified score in the scenario's direction, its arena rank, links to the project, run and submission;
screenshots at 1440 px (light) and 390 px (dark) in screenshots/."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from smrweb.tracking import services
from smrweb.tracking.models import ArenaResult, Role, Submission, SubmissionStatus
from tests.browser.conftest import push, score, state

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def verified(project, run: str, value: float, sid: str) -> Submission:
    push(project, run, state("running"), score(value, id=sid))
    Submission.objects.filter(project=project, event_id=sid).update(status=SubmissionStatus.VERIFIED)
    services.figures.rebuild_project_figures(project.pk)
    return Submission.objects.get(project=project, event_id=sid)


@pytest.mark.parametrize("width, height, scheme", [(1440, 1000, "light"), (390, 844, "dark")])
def test_the_board_ranks_readable_projects_by_their_best_verified_score(
    page, sign_in, alice, bob, project, screenshot_dir, width, height, scheme
):
    scenario = project.scenario
    teams = {}
    for slug, owner in (("gradient-gang", alice), ("loss-landers", alice), ("secret-lab", bob)):
        name = slug.replace("-", " ").title()
        teams[slug] = services.create_project(slug=slug, name=name, scenario=scenario)
        services.add_member(teams[slug], owner, role=Role.ADMIN)
    best = verified(teams["gradient-gang"], "adamw-warmup-cosine-long-name-run", 0.91, "g1")
    ArenaResult.objects.create(submission=best, arena="dogfight", rank=3, arena_score=0.9, recorded_by=alice)
    verified(teams["loss-landers"], "sgd-1", 0.84, "l1")
    verified(teams["secret-lab"], "x", 0.99, "s1")  # bob's: not on alice's board
    page.set_viewport_size({"width": width, "height": height})
    page.emulate_media(color_scheme=scheme)
    sign_in(alice)
    page.goto(f"/scenarios/{scenario.key}/")
    board = page.locator("#scenario-board")
    expect(board).to_contain_text("Leaderboard across projects")
    rows = board.locator("tbody tr")
    expect(rows).to_have_count(3)  # gradient-gang, loss-landers, and hill (no verified score)
    expect(rows.nth(0)).to_contain_text("Gradient Gang")
    expect(rows.nth(0)).to_contain_text("3")
    expect(rows.nth(1)).to_contain_text("Loss Landers")
    expect(rows.nth(2)).to_contain_text("no verified score")
    expect(board).not_to_contain_text("Secret Lab")
    board.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot_dir / f"scenario-board-{width}-{scheme}.png"), full_page=True)
    rows.nth(0).get_by_role("link", name="0.91").click()
    expect(page).to_have_url(re.compile(rf"/projects/gradient-gang/submissions/{best.pk}/$"))
