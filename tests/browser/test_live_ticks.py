"""Issue 36, item 4 in a real browser: the clock texts of a live page move by the page script alone. The run
page's polls are refused here (no answer ever reaches the page), and its relative time and its duration
still count up: the server's versions hold no clock, so a quiet page's polls are 204 and the text moves
anyway."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from smrweb.tracking import services
from tests.browser.conftest import push, state, turn

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_relative_time_and_a_duration_move_without_any_poll_answer(page, sign_in, alice, project):
    push(project, "quiet", state("running"), turn(1))
    services.flag_stalled_runs(now=timezone.now() + timedelta(hours=1))  # the stall task has flagged it
    sign_in(alice)
    polls = []

    def refuse_polls(route):
        if route.request.headers.get("hx-request"):
            polls.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    page.route(re.compile(r".*/projects/hill/runs/quiet/.*"), refuse_polls)
    page.goto("/projects/hill/runs/quiet/")
    assert page.locator("#run-poll[data-live]").count() == 1  # a live page: it does poll
    ago = page.locator("#run-last-activity time[data-ago]")
    stalled_for = page.locator("#alert-stalled time[data-since]")
    first_ago, first_for = ago.text_content(), stalled_for.text_content()
    assert re.fullmatch(r"\d+s ago", first_ago), first_ago
    assert re.fullmatch(r"\d+s", first_for), first_for
    expect(ago).not_to_have_text(first_ago, timeout=8_000)
    expect(stalled_for).not_to_have_text(first_for, timeout=8_000)
    assert int(stalled_for.text_content().rstrip("s")) >= int(first_for.rstrip("s")) + 4
    badge = page.locator(".badge-stalled")
    assert re.match(r"No progress for \d+s \(last activity", badge.get_attribute("title"))
    assert polls  # the page did poll; none of its polls got an answer
