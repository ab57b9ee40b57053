"""The knowledge page's arena history in a browser (issue 39, item 2): the chart draws rank (first place on
top) and arena score per recorded result, over time and, one click away, against the project's spend;
screenshots at 1440 px (light) and 390 px (dark) in screenshots/."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

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


@pytest.mark.parametrize("width, height, scheme", [(1440, 1000, "light"), (390, 844, "dark")])
def test_uploads_left_today_a_confirmation_past_the_limit_and_a_refusal(
    page, sign_in, alice, project, screenshot_dir, width, height, scheme
):
    scenario = project.scenario
    scenario.arena_name, scenario.arena_daily_limit = "dogfight", 1
    scenario.arena_timezone, scenario.arena_resets_at = "Europe/Paris", time(9, 30)
    scenario.save()
    push(project, "r1", state("running"), score(0.61, id="s1"), score(0.72, id="s2"))
    Submission.objects.filter(project=project).update(status="approved")
    first, second = Submission.objects.filter(project=project).order_by("score")
    page.set_viewport_size({"width": width, "height": height})
    page.emulate_media(color_scheme=scheme)
    sign_in(alice)

    page.goto(f"/projects/hill/submissions/{first.pk}/")
    allowance = page.locator("#arena [data-arena-allowance]")
    expect(allowance).to_contain_text("1 upload left today")
    expect(allowance).to_contain_text("resets 09:30 Europe/Paris")
    page.get_by_role("button", name="Mark uploaded").click()
    expect(page.locator("#arena [data-arena-allowance]")).to_contain_text("No uploads left today")
    page.locator("#arena summary", has_text="The arena refused the file").click()
    page.locator("#id_refusal_reason").fill("Banned import: ctypes (the arena's rule 4).")
    page.get_by_role("button", name="Record refusal").click()
    expect(page.locator("[data-arena-refused]")).to_contain_text("Banned import: ctypes")
    page.locator("#arena").scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot_dir / f"arena-refused-{width}-{scheme}.png"), full_page=False)

    page.goto(f"/projects/hill/submissions/{second.pk}/")
    confirm = page.locator("[data-confirm-over-limit] input")
    expect(confirm).to_be_visible()
    page.get_by_role("button", name="Mark uploaded").click()  # not confirmed: refused, nothing recorded
    expect(page.locator("#arena .form-error")).to_contain_text("takes 1 upload a day")
    page.locator("#arena").scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot_dir / f"arena-over-limit-{width}-{scheme}.png"), full_page=False)
    second.refresh_from_db()
    assert second.status == "approved"
    page.locator("[data-confirm-over-limit] input").check()
    page.get_by_role("button", name="Mark uploaded").click()
    expect(page.locator(".lifecycle")).to_contain_text("uploaded")
    second.refresh_from_db()
    assert second.status == "uploaded"
