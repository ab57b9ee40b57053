"""The knowledge page's arena history in a browser (issue 39, item 2): the chart draws rank (first place on
top) and arena score per recorded result, over time and, one click away, against the project's spend;
screenshots at 1440 px (light) and 390 px (dark) in screenshots/."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import expect

from smrweb.tracking.models import ArenaResult, Submission
from tests.browser.conftest import push, score, state, turn

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

T0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize("width, height, scheme", [(1440, 1000, "light"), (390, 844, "dark")])
def test_the_arena_chart_over_time_and_against_spend(
    page, sign_in, alice, project, screenshot_dir, width, height, scheme
):
    ranks = [41, 27, 30, 12, 9, 4]
    for i, rank in enumerate(ranks):
        hour = T0 + timedelta(hours=8 * i)
        push(
            project,
            f"r{i}",
            state("running"),
            *[
                turn(n, cost_usd=0.4 * (i + 1), ts=(hour + timedelta(minutes=n)).isoformat())
                for n in range(1, 6)
            ],
            score(0.5 + i / 20, id=f"s{i}", ts=(hour + timedelta(minutes=10)).isoformat()),
        )
        result = ArenaResult.objects.create(
            submission=Submission.objects.get(project=project, event_id=f"s{i}"),
            arena="dogfight",
            rank=rank,
            arena_score=0.45 + i / 25,
            recorded_by=alice,
        )
        ArenaResult.objects.filter(pk=result.pk).update(created=hour + timedelta(hours=2))
    page.set_viewport_size({"width": width, "height": height})
    page.emulate_media(color_scheme=scheme)
    sign_in(alice)
    page.goto("/projects/hill/knowledge/")
    card = page.locator("#arena-history")
    expect(card).to_contain_text("6 recorded results")
    expect(card.locator(".plot .main-svg").first).to_be_visible()
    card.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot_dir / f"arena-history-{width}-{scheme}.png"), full_page=False)
    card.get_by_role("link", name="spend").click()
    expect(page.locator("#arena-history b[aria-current]")).to_have_text("spend")
    expect(page.locator("#arena-history .plot .main-svg").first).to_be_visible()
    expect(page.locator("#arena-history .xtitle")).to_contain_text("USD spent")
    page.locator("#arena-history").scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot_dir / f"arena-history-spend-{width}-{scheme}.png"), full_page=False)
