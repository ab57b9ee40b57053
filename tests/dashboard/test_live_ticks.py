"""Issue 36, items 4 and 5: no tick that invalidates everything, and a poll after one new turn that renders
only what shows it.

Versions hold no clock: the clock texts a polled card shows (relative times, "stalled for", a forecast's "in
2h") are <time> elements the page script keeps current, so a page with nothing new answers its polls 204
however long it stays open. The burn forecast is read at the run's newest turn (the half hour up to it), so
it moves with a new turn and once more when that turn leaves the half hour, never with the clock alone; the
live timeline's axis end moves when now passes it (what the card draws). A new turn re-renders the cards
that show turns, and of the turns table its new row."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine

from smrweb.dashboard import live
from smrweb.dashboard.views import runs
from smrweb.tracking import services
from smrweb.tracking.models import Run
from tests.factories import push

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 22, 12, 0, 5, tzinfo=UTC)  # 5 s into a 30-second period
LATER = timedelta(seconds=31)  # past the next 30-second tick the versions used to hold


def at(minutes: float) -> str:
    return (NOW - timedelta(minutes=minutes)).isoformat()


def turn(n: int, minutes: float, actor: str = "driver") -> dict:
    return {
        "type": "agent.turn",
        "turn": n,
        "actor": actor,
        "tokens_in": 1000,
        "tokens_out": 100,
        "cost_usd": 0.01,
        "ts": at(minutes),
    }


def cards_of(html: str, into: dict | None = None) -> dict:
    into = {} if into is None else into
    into.update(re.findall(r'data-card="([^"]+)"\s+data-version="([^"]*)"', html))
    return into


def cards_poll(client, url: str, shown: dict):
    return client.get(url, headers={"HX-Request": "true", live.CARDS_HEADER: live.cards_header(shown)})


def version_poll(client, url: str, page: str):
    version = re.search(r'"X-Smrweb-Version": "([0-9a-f]+)"', page)[1]
    return client.get(url, headers={"HX-Request": "true", live.VERSION_HEADER: version})


@pytest.fixture
def clock():
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


@pytest.fixture
def world(project, clock):
    """A finished run and a live one (ten turns, a score, a budget), written a few minutes ago."""
    clock.move_to(NOW - timedelta(minutes=3))
    push(project, "done", {"type": "state", "state": "running", "ts": at(30)}, turn(1, 29), turn(2, 28))
    push(project, "done", {"type": "score", "score": 0.3, "ts": at(27)}, {"type": "state", "state": "done"})
    push(
        project,
        "live",
        {"type": "state", "state": "running", "ts": at(20)},
        *(turn(n, 20 - n, "driver" if n % 2 else "worker-1") for n in range(1, 11)),
        {"type": "score", "score": 0.5, "ts": at(9)},
    )
    services.update_run_settings(project, "live", budget_usd=Decimal("5"))
    clock.move_to(NOW)
    return project


def test_pages_with_nothing_new_answer_their_polls_204_after_the_tick(client_alice, world, clock):
    """The overview, the project page (its runs block and its chart) and a finished run's page: every
    version the same 31 s later, every poll 204. (Each used to fold the 30-second tick into its version.)"""
    overview = client_alice.get("/").content.decode()
    project_page = client_alice.get("/projects/hill/").content.decode()
    chart = client_alice.get("/projects/hill/chart/", headers={"HX-Request": "true"}).content.decode()
    done = client_alice.get("/projects/hill/runs/done/").content.decode()
    shown_project, shown_done = cards_of(project_page), cards_of(done)
    assert shown_project and len(shown_done) > 10
    assert version_poll(client_alice, "/", overview).status_code == 204  # the polls work at all

    clock.shift(LATER)
    assert version_poll(client_alice, "/", overview).status_code == 204
    assert cards_poll(client_alice, "/projects/hill/", shown_project).status_code == 204
    assert version_poll(client_alice, "/projects/hill/chart/", chart).status_code == 204
    assert cards_poll(client_alice, "/projects/hill/runs/done/", shown_done).status_code == 204
    # And the versions the pages show now are those they showed.
    assert cards_of(client_alice.get("/projects/hill/runs/done/").content.decode()) == shown_done
    assert cards_of(client_alice.get("/projects/hill/").content.decode()) == shown_project


def test_a_stalled_run_moves_only_its_timelines_axis_with_the_clock(client_alice, world, clock):
    """31 s on, a stalled live run's page re-sends at most the timeline (when now passed its axis end); not
    the budget card (its burn is read at the newest turn), the title (its stalled badge) nor the alerts (the
    stalled banner's "for 2h 5m"), which used to move with every tick."""
    url = "/projects/hill/runs/live/"
    clock.shift(timedelta(hours=2))  # past the project's stall threshold
    services.flag_stalled_runs()
    run = Run.objects.get(external_id="live")
    assert run.is_stalled
    shown = cards_of(client_alice.get(url).content.decode())
    assert 'id="alert-stalled"' in client_alice.get(url).content.decode()
    clock.shift(LATER)
    answer = cards_poll(client_alice, url, shown)
    moved = set(cards_of(answer.content.decode())) if answer.status_code == 200 else set()
    allowed = {"run-timeline-card"}
    assert moved <= allowed, moved - allowed


def test_the_budget_card_moves_with_a_turn_and_once_its_burn_window_has_passed(client_alice, world, clock):
    """A burning run's budget card: the same version tick after tick (its forecast is read at the newest turn
    and does not creep), a new version when a turn comes, and one more when that turn leaves the half hour the
    rate is read over (no forecast then), then none."""
    url = "/projects/hill/runs/live/"
    push(world, "live", turn(11, 0))  # a turn now: burning
    page = client_alice.get(url).content.decode()
    first = cards_of(page)["budget"]
    assert "budget runs out" in page.split('id="budget-forecast"', 1)[1].split("<!--", 1)[0]
    versions = []
    for _ in range(4):  # two minutes, four ticks
        clock.shift(LATER)
        versions.append(cards_of(client_alice.get(url).content.decode())["budget"])
    assert set(versions) == {first}

    push(world, "live", turn(12, -2.0))  # a new turn (2 min on): the card moves
    after_turn = client_alice.get(url).content.decode()
    assert cards_of(after_turn)["budget"] != first

    clock.move_to(NOW + timedelta(minutes=2.0 + 30.5))  # the newest turn has left the half hour
    idle = client_alice.get(url).content.decode()
    assert cards_of(idle)["budget"] != cards_of(after_turn)["budget"]
    assert "Nothing spent in the last 30m" in idle
    clock.shift(timedelta(minutes=10))
    assert cards_of(client_alice.get(url).content.decode())["budget"] == cards_of(idle)["budget"]


def test_clock_texts_of_a_polled_card_are_kept_current_by_the_page(client_alice, world, clock):
    """A stalled live run with a budget forecast: "stalled for", the stalled badge's hover, the budget's
    "runs out in", the last activity and each turn's time are <time> elements (or attributes) the page
    script rewrites, not text fixed at the server's now."""
    clock.shift(timedelta(hours=2))  # past the project's stall threshold
    services.flag_stalled_runs()
    push(world, "live", turn(11, 1))  # something burning in the last half hour, for a forecast
    clock.shift(timedelta(hours=3))
    services.flag_stalled_runs()
    run = Run.objects.get(external_id="live")
    assert run.is_stalled
    clock.move_to(NOW + timedelta(hours=5, minutes=10))
    page = client_alice.get("/projects/hill/runs/live/").content.decode()
    stalled = page.split('id="alert-stalled"', 1)[1].split("</div>", 1)[0]
    since = run.last_progress_at.astimezone(UTC).isoformat(timespec="seconds")
    ticking = rf'for <time datetime="{re.escape(since)}" data-since="long">\d+h( \d+m)?</time>'
    assert re.search(ticking, stalled), stalled
    badge = re.search(r'<span class="badge badge-stalled"[^>]*>', page)[0]
    assert 'data-since-title="No progress for {} (last activity' in badge and "data-since-at=" in badge
    activity = page.split('id="run-last-activity"', 1)[1].split("</span>", 1)[0]
    assert 'data-ago="long"' in activity
    rows = page.split('id="turns-body"', 1)[1].split("</tbody>", 1)[0]
    assert rows.count('data-ago="long"') == 11


def test_a_forecast_counts_down_in_the_page(client_alice, world, clock):
    push(world, "live", turn(11, 0.5))
    page = client_alice.get("/projects/hill/runs/live/").content.decode()
    forecast = page.split('id="budget-forecast"', 1)[1].split("<!--", 1)[0]
    assert "budget runs out" in forecast
    assert re.search(r'<time datetime="[^"]+" data-until="long">in \d', forecast), forecast


def test_a_poll_after_one_new_turn_renders_the_cards_that_show_turns_and_one_row(
    client_alice, world, clock, monkeypatch
):
    """The title, the alerts and the rest are not rendered for a turn that changes nothing they show (the
    spend is not over budget, there is no "no progress" reading); the turns table renders the new turn's row
    alone, and the answer carries that row, not the table."""
    url = "/projects/hill/runs/live/"
    shown = cards_of(client_alice.get(url).content.decode())
    rendered: list[str] = []
    card = runs.RunPage.render_card
    monkeypatch.setattr(runs.RunPage, "render_card", lambda page, *a: rendered.append(a[0]) or card(page, *a))
    rows_rendered: list[int] = []
    kept_rows = getattr(live, "kept_rows", None)

    def counting(scope, rows, render):
        return kept_rows(scope, rows, lambda items: rows_rendered.append(len(items)) or render(items))

    monkeypatch.setattr(live, "kept_rows", counting, raising=False)

    assert cards_poll(client_alice, url, shown).status_code == 204
    assert rendered == []
    push(world, "live", turn(11, 0.1))
    clock.shift(timedelta(seconds=2))
    answer = cards_poll(client_alice, url, shown)
    body = answer.content.decode()
    assert answer.status_code == 200
    shows_turns = {"run-activity", "run-stats", "run-timeline-card", "budget", "run-actors", "turns-card"}
    whole = shows_turns - set(runs.RunPage.PARTS)  # the stats: their parts that show spend and turns, alone
    assert set(rendered) == whole, set(rendered) ^ whole
    assert set(cards_of(body)) <= shows_turns
    assert rows_rendered == [1]  # the new turn's row; the ten others from the cache
    assert re.findall(r'<tr data-turn="(\d+)"', body) == ["11"]
    assert 'hx-swap-oob="afterbegin:#turns-body"' in body and 'id="turns-card"' not in body.split("--v")[0]
    cards_of(body, shown)
    assert cards_poll(client_alice, url, shown).status_code == 204


def test_the_timeline_keeps_its_score_side_until_a_turn_lands_before_a_score(world, clock):
    """The score side of the timeline (each score's turn before it, the frontier) is kept under the scores'
    version: a turn after the last score reuses it, a turn back-dated before a score reads it again. Either
    way it equals what a timeline read from scratch shows."""
    from smrweb.tracking.queries import timeline

    def read(version):
        run = Run.objects.select_related("project__scenario").get(external_id="live")
        return timeline.run_timeline(run, now=NOW, scores_version=version)

    def fresh():
        return read(None)

    push(world, "live", {"type": "score", "score": 0.6, "ts": at(4)})
    kept = read("v1")
    assert kept.score_turns == fresh().score_turns and kept.score_turns[-1] == (10, "worker-1")
    push(world, "live", turn(11, 1))  # after the last score
    assert read("v1").score_turns == fresh().score_turns == kept.score_turns
    push(world, "live", turn(12, 5))  # back-dated: now the turn before the last score
    again = read("v1")
    assert again.score_turns == fresh().score_turns and again.score_turns[-1] == (12, "driver")
    assert again.frontier == fresh().frontier and again.turn_total == 12
