"""One clock (issue 14, item 3): every time on pages and charts in UTC, or in the browser's zone when the
user chose it; labels name the zone; chart times go out as zone-less strings already in that zone (plotly
would otherwise draw epoch numbers in the browser's zone under a "UTC" label)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from smrweb.dashboard import charts, clock
from smrweb.dashboard.models import Clock, UserPreference
from smrweb.dashboard.templatetags.smrweb import ago, ago_short
from tests.factories import push

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)  # 13:00 in Paris, 04:00 in Los Angeles


def at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat()


def figure(body: str, script_id: str) -> dict:
    match = re.search(rf'<script id="{script_id}" type="application/json">(.*?)</script>', body, re.S)
    return json.loads(match.group(1))


@pytest.fixture
def run_page(project):
    push(
        project,
        "tz-1",
        {"type": "state", "state": "running", "ts": at(0)},
        {
            "type": "agent.turn",
            "turn": 1,
            "actor": "driver",
            "tokens_in": 100,
            "tokens_out": 10,
            "cost_usd": 0.01,
            "ts": at(1),
        },
        {"type": "score", "score": 0.5, "ts": at(0.5)},  # before any turn: no turn to name
        {
            "type": "agent.turn",
            "turn": 7,
            "actor": "worker-2",
            "parent_actor": "driver",
            "tokens_in": 100,
            "tokens_out": 10,
            "cost_usd": 0.01,
            "ts": at(2),
        },
        {"type": "score", "score": 0.7, "ts": at(3)},
        {"type": "state", "state": "done", "ts": at(4)},
    )
    return "/projects/hill/runs/tz-1/"


def test_a_user_without_a_preference_sees_utc_everywhere(client_alice, run_page):
    body = client_alice.get(run_page).content.decode()
    assert re.search(r"started <b>2026-11-21 12:00</b> UTC", body)
    fig = figure(body, "run-timeline-data")
    assert fig["layout"]["xaxis"]["title"]["text"] == "time (UTC)"
    scores = next(t for t in fig["data"] if t.get("legendgroup") == "score")
    assert scores["x"] == ["2026-11-21 12:00:30.000", "2026-11-21 12:03:00.000"]
    assert 'data-clock="utc" data-clock-zone="UTC"' in body


def test_choosing_the_browser_zone_moves_text_and_charts_together(client_alice, alice, run_page):
    response = client_alice.post("/preferences/", {"clock": "local", "local_zone": "Europe/Paris"})
    assert response.status_code == 302
    assert UserPreference.objects.get(user=alice).clock == Clock.LOCAL
    body = client_alice.get(run_page).content.decode()
    assert re.search(r"started <b>2026-11-21 13:00</b> Europe/Paris", body)
    assert " UTC" not in re.sub(r"<script.*?</script>", "", body, flags=re.S).replace("(UTC)", "")
    fig = figure(body, "run-timeline-data")
    assert fig["layout"]["xaxis"]["title"]["text"] == "time (Europe/Paris)"
    assert "Europe/Paris" in fig["layout"]["xaxis"]["hoverformat"]
    scores = next(t for t in fig["data"] if t.get("legendgroup") == "score")
    assert scores["x"] == ["2026-11-21 13:00:30.000", "2026-11-21 13:03:00.000"]
    assert all(isinstance(x, str) and "+" not in x and "Z" not in x for t in fig["data"] for x in t["x"])


def test_the_browser_cookie_follows_a_user_who_travels(client_alice, alice, run_page):
    clock.set_clock(alice, clock="local", local_zone="Europe/Paris")
    client_alice.cookies[clock.ZONE_COOKIE] = "America/Los_Angeles"
    body = client_alice.get(run_page).content.decode()
    assert re.search(r"started <b>2026-11-21 04:00</b> America/Los_Angeles", body)
    client_alice.cookies[clock.ZONE_COOKIE] = "../../etc/passwd"  # not a zone: the stored one is used
    body = client_alice.get(run_page).content.decode()
    assert re.search(r"started <b>2026-11-21 13:00</b> Europe/Paris", body)


def test_a_utc_user_is_not_moved_by_the_browser_cookie(client_alice, run_page):
    client_alice.cookies[clock.ZONE_COOKIE] = "Asia/Tokyo"
    body = client_alice.get(run_page).content.decode()
    assert re.search(r"started <b>2026-11-21 12:00</b> UTC", body)


def test_local_without_a_zone_from_the_browser_is_refused_and_utc_stays(client_alice, alice):
    response = client_alice.post("/preferences/", {"clock": "local", "local_zone": ""})
    assert response.status_code == 200
    assert "did not report a time zone" in response.content.decode()
    assert not UserPreference.objects.filter(user=alice).exists()
    assert (
        client_alice.post("/preferences/", {"clock": "local", "local_zone": "Mars/Olympus"}).status_code
        == 200
    )
    assert not UserPreference.objects.filter(user=alice).exists()


def test_back_to_utc_forgets_the_zone(client_alice, alice, run_page):
    clock.set_clock(alice, clock="local", local_zone="Europe/Paris")
    assert "Europe/Paris" in client_alice.get(run_page).content.decode()
    client_alice.post("/preferences/", {"clock": "utc", "local_zone": "Europe/Paris"})
    pref = UserPreference.objects.get(user=alice)
    assert (pref.clock, pref.local_zone) == (Clock.UTC, "")
    assert re.search(r"started <b>2026-11-21 12:00</b> UTC", client_alice.get(run_page).content.decode())


def test_the_preferences_page_is_in_the_nav_and_says_the_current_zone(client_alice, alice):
    clock.set_clock(alice, clock="local", local_zone="Asia/Kolkata")
    body = client_alice.get("/").content.decode()
    assert 'href="/preferences/"' in body and "Asia/Kolkata" in body
    page = client_alice.get("/preferences/").content.decode()
    assert 'value="local"' in page and "checked" in page.split('value="local"')[1].split(">")[0]


def test_score_hover_names_the_time_and_the_turn_before_it(client_alice, run_page):
    fig = figure(client_alice.get(run_page).content.decode(), "run-timeline-data")
    scores = next(t for t in fig["data"] if t.get("legendgroup") == "score")
    assert scores["customdata"] == ["", "<br>after turn #7 · worker-2"]
    assert "%{x|" in scores["hovertemplate"] and "%{customdata}" in scores["hovertemplate"]
    assert "UTC" in scores["hovertemplate"]


def test_time_axes_have_no_fixed_range_that_a_poll_would_move(client_alice, run_page):
    """A range given in the figure that changes with every poll (its end is "now") makes plotly drop the
    viewer's zoom despite uirevision; the axes autorange over traces that span the run instead."""
    fig = figure(client_alice.get(run_page).content.decode(), "run-timeline-data")
    assert "range" not in fig["layout"]["xaxis"] and fig["layout"]["uirevision"]
    fig = charts.project_scores_figure(
        [("r", "/r/", [(T0, 1.0)], [])],
        [(T0, 1.0)],
        maximize=True,
        metric="m",
        start=T0,
        end=T0 + timedelta(hours=1),
        uirevision="p",
    )
    assert "range" not in fig["layout"]["xaxis"]
    assert fig["data"][-1]["x"][-1] == "2026-11-21 13:00:00.000"  # the best-so-far line reaches the end


def test_epoch_step_metrics_are_drawn_in_the_clock_too():
    class P:  # a bucket of `queries.metric_series`
        def __init__(self, step, value):
            self.step, self.value, self.min, self.max = step, value, value, value

    epoch_ms = int(T0.timestamp() * 1000)
    with timezone.override("Asia/Tokyo"):
        fig = charts.metric_figure("loss", [P(epoch_ms, 1.0)], total=1, uirevision="m")
    assert fig["data"][-1]["x"] == ["2026-11-21 21:00:00.000"]
    assert fig["layout"]["xaxis"]["title"]["text"] == "time (Asia/Tokyo)"


def test_relative_times_carry_their_moment_for_the_page_to_keep_current():
    moment = timezone.now() - timedelta(seconds=90)
    html = str(ago(moment))
    assert re.fullmatch(r'<time datetime="[^"]+" data-ago="long">1m 30s ago</time>', html)
    assert datetime.fromisoformat(re.search(r'datetime="([^"]+)"', html).group(1)) == moment.replace(
        microsecond=0
    )
    assert re.fullmatch(r'<time datetime="[^"]+" data-ago="short">1m ago</time>', str(ago_short(moment)))
    assert ago(None) == "never"


def test_the_api_answers_in_utc_even_to_a_signed_in_user_on_local_time(client_alice, alice, run_page):
    clock.set_clock(alice, clock="local", local_zone="Europe/Paris")
    client_alice.cookies[clock.ZONE_COOKIE] = "Europe/Paris"
    runs = client_alice.get("/api/v1/projects/hill/runs").json()
    run = next(r for r in (runs["results"] if isinstance(runs, dict) else runs) if r["external_id"] == "tz-1")
    assert datetime.fromisoformat(run["started_at"].replace("Z", "+00:00")).utcoffset() == timedelta(0)
    assert "Europe/Paris" in client_alice.get(run_page).content.decode()  # while the pages follow the choice
