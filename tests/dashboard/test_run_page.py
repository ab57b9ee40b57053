"""The run page's read side and partials: the one-clock timeline (binned, downsampled), the burn
forecast, efficiency, the actor tree, turn details, metric charts, cheap polls, empty and huge runs."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from urllib.parse import quote

import pytest
import time_machine
from django.contrib.auth.models import User

from smrweb.dashboard import live
from smrweb.dashboard.live import VERSION_HEADER
from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import Run, Submission
from smrweb.tracking.queries import summary_reference, timeline
from smrweb.tracking.services import submissions
from tests.factories import push

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat()


def turn(n, minutes, *, actor="driver", parent=None, cost=0.01, tin=1000, tout=100, **extra):
    event = {
        "type": "agent.turn",
        "turn": n,
        "actor": actor,
        "tokens_in": tin,
        "tokens_out": tout,
        "cost_usd": cost,
        "ts": at(minutes),
        **extra,
    }
    if parent:
        event["parent_actor"] = parent
    return event


def score(value, minutes):
    return {"type": "score", "score": value, "ts": at(minutes)}


def figure(body: str, script_id: str) -> dict:
    match = re.search(rf'<script id="{script_id}" type="application/json">(.*?)</script>', body, re.S)
    assert match, f"no {script_id} on the page"
    return json.loads(match.group(1))


def cards_of(html: str, into: dict | None = None) -> dict:
    """The card versions a page (or a poll's answer) shows: what the page script sends with its poll."""
    into = {} if into is None else into
    into.update(re.findall(r'data-card="([^"]+)"\s+data-version="([^"]*)"', html))
    return into


def poll_headers(shown: dict) -> dict:
    return {"HX-Request": "true", live.CARDS_HEADER: live.cards_header(shown)}


def points_in(fig: dict) -> int:
    return sum(len(trace.get("x", [])) for trace in fig["data"])


# --- timeline ----------------------------------------------------------------------------------------


def test_timeline_puts_scores_and_turns_on_one_clock_with_cumulative_spend(project):
    push(
        project,
        "r1",
        turn(0, 0, cost=0.5),
        turn(1, 10, cost=0.25),
        turn(0, 20, actor="w", parent="driver", cost=1.0),
        score(0.3, 5),
        score(0.2, 15),
        score(0.7, 25),
    )
    run = Run.objects.get(external_id="r1")
    with time_machine.travel(T0 + timedelta(minutes=30), tick=False):
        tl = timeline.run_timeline(run)
    assert tl.turn_total == 3 and tl.score_total == 3
    assert tl.start == T0
    assert [v for _, v in tl.scores] == [0.3, 0.2, 0.7]
    assert tl.frontier == [(T0 + timedelta(minutes=5), 0.3), (T0 + timedelta(minutes=25), 0.7)]
    assert sum(b.count for b in tl.bins) == 3
    assert sum(b.cost_usd for b in tl.bins) == Decimal("1.75")
    assert tl.cumulative[-1][1:] == (Decimal("1.75"), Decimal("0.75"))  # total, driver
    totals = [total for _, total, _ in tl.cumulative]
    assert totals == sorted(totals)


def test_timeline_of_ten_thousand_turns_ships_a_bounded_figure(
    client_alice, project, django_assert_max_num_queries
):
    events = [
        turn(
            i,
            i * 0.05,
            actor="driver" if i % 3 else "w",
            parent=None if i % 3 else "driver",
            cost=0.001 * (i % 7),
        )
        for i in range(10_000)
    ]
    events += [score(i / 100, i * 5) for i in range(100)]
    for start in range(0, len(events), 5000):
        push(project, "big", *events[start : start + 5000])
    run = Run.objects.get(external_id="big")
    assert run.turn_count == 10_000
    # 36: 30 before alerts, plus the inbox bell's count and the run's alert reads (its loops, its progress
    # since the best score, its snooze), its lineage (parent and next runs), and its params (the MLflow card);
    # 38: the live cards' markers (one query: what each card's version is made of).
    with django_assert_max_num_queries(38):
        response = client_alice.get("/projects/hill/runs/big/")
    assert response.status_code == 200
    fig = figure(response.content.decode(), "run-timeline-data")
    bars = [t for t in fig["data"] if t["type"] == "bar"]
    assert {t["yaxis"] for t in bars} == {"y2", "y3"}
    assert all(len(t["x"]) <= timeline.MAX_BINS for t in bars)
    assert points_in(fig) < 5000
    tokens_drawn = sum(sum(t["y"]) for t in bars if t["yaxis"] == "y2")
    assert tokens_drawn == run.tokens_in + run.tokens_out  # binning loses no tokens
    cumulative = next(t for t in fig["data"] if t["name"] == "total USD")
    assert cumulative["y"][-1] == pytest.approx(float(run.cost_usd))


def test_run_page_query_count_does_not_grow_with_turns(client_alice, project, django_assert_max_num_queries):
    push(project, "small", turn(0, 0), score(0.1, 1))
    push(project, "large", *[turn(i, i) for i in range(400)], *[score(i / 10, i) for i in range(40)])
    # 37: 30 before alerts, plus the inbox bell and the run's alert reads (loops, progress ×2, snooze), its
    # lineage and its params; 38: the live cards' markers.
    with django_assert_max_num_queries(38) as small:
        client_alice.get("/projects/hill/runs/small/")
    with django_assert_max_num_queries(len(small.captured_queries)):
        client_alice.get("/projects/hill/runs/large/")


def test_empty_run_shows_designed_empty_states(client_alice, project):
    push(project, "quiet", {"type": "state", "state": "queued"})
    body = client_alice.get("/projects/hill/runs/quiet/").content.decode()
    assert "Nothing to plot yet" in body
    assert "run-timeline-data" not in body
    assert "No agent turns yet" in body
    assert "No metrics yet" in body
    assert "No experiments" in body
    assert "needs a first score" in body


# --- budget forecast and efficiency ------------------------------------------------------------------


def test_burn_rate_and_forecast_of_when_the_budget_runs_out(project):
    with time_machine.travel(T0, tick=False):  # the run starts at T0
        services.update_run_settings(project, "r1", budget_usd=Decimal("10"), budget_tokens=1_000_000)
    # $1 in the last 30 minutes → $2/h; $9 left → 4.5 h. Tokens: 11k/30 min → 22k/h, 989k left → ~45 h.
    push(project, "r1", turn(0, 40, cost=0.5, tin=5000, tout=500), turn(1, 55, cost=0.5, tin=5000, tout=500))
    run = Run.objects.get(external_id="r1")
    now = T0 + timedelta(minutes=60)
    burn = timeline.burn_forecast(run, now=now)
    assert burn.window == timedelta(minutes=30)
    assert burn.usd_per_hour == Decimal("2")
    assert burn.tokens_per_hour == 22_000
    assert burn.usd_left == Decimal("9")
    assert burn.runs_out_on == "USD"
    # Read at the newest turn (55 min), not at now: the forecast does not move while no turn comes.
    assert burn.as_of == T0 + timedelta(minutes=55)
    assert burn.runs_out_at == T0 + timedelta(minutes=55) + timedelta(hours=4.5)
    assert timeline.burn_forecast(run, now=now + timedelta(minutes=20)) == burn
    assert not burn.exceeded
    # Once the newest turn leaves the window, nothing burns: no rate, no forecast.
    idle = timeline.burn_forecast(run, now=T0 + timedelta(minutes=55 + 31))
    assert (idle.usd_per_hour, idle.tokens_per_hour, idle.runs_out_at, idle.as_of) == (0, 0, None, None)
    assert idle.usd_left == Decimal("9") and not idle.exceeded


def test_forecast_says_exceeded_and_finished_runs_burn_nothing(project):
    services.update_run_settings(project, "r1", budget_usd=Decimal("0.5"))
    push(project, "r1", turn(0, 0, cost=0.75))
    run = Run.objects.get(external_id="r1")
    assert timeline.burn_forecast(run, now=T0 + timedelta(minutes=1)).exceeded
    push(project, "r1", {"type": "state", "state": "done", "ts": at(2)})
    assert timeline.burn_forecast(Run.objects.get(external_id="r1")) is None


def test_efficiency_counts_score_gained_since_the_first_score_per_dollar_and_tokens(project):
    push(
        project,
        "r1",
        turn(0, 0, cost=1.0, tin=10_000, tout=0),
        score(0.2, 1),
        turn(1, 2, cost=0.5, tin=4000, tout=1000),
        score(0.7, 3),
        turn(2, 4, cost=0.5, tin=5000, tout=0),
    )
    eff = timeline.efficiency(Run.objects.get(external_id="r1"))
    assert eff.gained == pytest.approx(0.5)
    assert eff.usd_since == Decimal("1.0")
    assert eff.tokens_since == 10_000
    assert eff.per_usd == pytest.approx(0.5)
    assert eff.per_1k_tokens == pytest.approx(0.05)


def test_efficiency_read_from_kept_aggregates_equals_a_sum_over_the_turns_after_random_turns(project):
    """The spend since the first score comes from the kept turn aggregates advanced by the turns since (not a
    sum over every turn before it); after random turns — late ones before the first score and ties with it
    included — and a new first score, it equals the sum over the turns read from scratch."""
    import random

    from django.db.models import Sum

    rng = random.Random(36)
    push(project, "r1", turn(0, 0), score(0.2, 30))
    for i in range(1, 40):
        # Before or after the first score, or at the very moment of one (a tie counts as before it).
        minutes = rng.choice([rng.uniform(0, 29.9), rng.uniform(30.1, 90), 30.0, 10.0])
        push(
            project, "r1", turn(i, minutes, cost=round(rng.uniform(0.001, 0.1), 6), tin=rng.randint(1, 9000))
        )
        if i == 25:
            push(project, "r1", score(0.1, 10))  # a new first score: the moment moves
        run = Run.objects.get(external_id="r1")
        eff = timeline.efficiency(run)
        first = Submission.objects.filter(run=run).order_by("ts").first().ts
        after = run.turns.filter(ts__gt=first).aggregate(
            usd=Sum("cost_usd"), tin=Sum("tokens_in"), t=Sum("tokens_out")
        )
        assert eff.usd_since == (after["usd"] or 0), i
        assert eff.tokens_since == (after["tin"] or 0) + (after["t"] or 0), i


def test_efficiency_of_a_minimize_scenario_counts_going_down_as_gain(project):
    project.scenario.direction = "minimize"
    project.scenario.save()
    push(project, "r1", score(10.0, 0), turn(0, 1, cost=2.0), score(4.0, 2))
    eff = timeline.efficiency(Run.objects.get(external_id="r1"))
    assert eff.gained == pytest.approx(6.0)
    assert eff.per_usd == pytest.approx(3.0)


# --- actors and turn details -------------------------------------------------------------------------


def test_actor_tree_nests_children_under_parents_depth_first(project):
    push(
        project,
        "r1",
        turn(0, 0),
        turn(0, 1, actor="planner", parent="driver"),
        turn(0, 2, actor="coder", parent="planner", cost=0.2),
        turn(1, 3, actor="coder", parent="planner", cost=0.3),
        turn(0, 4, actor="tester", parent="driver"),
        turn(0, 5, actor="orphan", parent="ghost"),
    )
    tree = timeline.actor_tree(Run.objects.get(external_id="r1"))
    assert [(n.actor, n.depth) for n in tree] == [
        ("driver", 0),
        ("planner", 1),
        ("coder", 2),
        ("tester", 1),
        ("ghost", 0),
        ("orphan", 1),
    ]
    coder = next(n for n in tree if n.actor == "coder")
    assert coder.turns == 2 and coder.cost_usd == Decimal("0.5")
    assert next(n for n in tree if n.actor == "ghost").turns == 0  # reported only as a parent


def test_turn_detail_shows_tool_calls_escaped(client_alice, project):
    push(
        project,
        "r1",
        turn(
            3,
            0,
            model="gpt-5.4-mini",
            duration_ms=1234,
            tool_calls=["read_file", {"name": "<script>alert(1)</script>", "args": {"path": "a<b"}}],
        ),
    )
    pk = Run.objects.get(external_id="r1").turns.get().pk
    response = client_alice.get(f"/projects/hill/runs/r1/turns/{pk}/")
    body = response.content.decode()
    assert response.status_code == 200
    assert "Turn 3" in body and "gpt-5.4-mini" in body and "1.2 s" in body
    assert "2 tool calls" in body and "read_file" in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body and "<script>alert" not in body
    assert "a&lt;b" in body


def test_a_timeline_bar_click_lists_that_bins_turns_of_that_kind(client_alice, project):
    push(project, "r1", turn(0, 0), turn(1, 0.5), turn(0, 0.7, actor="w", parent="driver"), turn(2, 9))
    url = "/projects/hill/runs/r1/turns/"
    origin = T0.isoformat()
    width_us = 60 * 1_000_000
    body = client_alice.get(
        url, {"origin": origin, "width_us": width_us, "bin": 0, "kind": "d"}
    ).content.decode()
    assert "2 turns" in body and body.count("data-turn-detail") == 2
    body = client_alice.get(
        url, {"origin": origin, "width_us": width_us, "bin": 0, "kind": "c"}
    ).content.decode()
    assert "Turn 0" in body and body.count("data-turn-detail") == 1
    body = client_alice.get(url, {"origin": origin, "width_us": width_us, "bin": 9}).content.decode()
    assert body.count("data-turn-detail") == 1 and "Turn 2" in body


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"origin": "yesterday", "width_us": 5, "bin": 0},
        {"origin": T0.isoformat(), "width_us": "x", "bin": 0},
        {"origin": T0.isoformat(), "width_us": 0, "bin": 0},
        {"origin": T0.isoformat(), "width_us": 10, "bin": -1},
    ],
)
def test_unreadable_bar_parameters_are_a_clear_400_not_a_500(client_alice, project, params):
    push(project, "r1", turn(0, 0))
    response = client_alice.get("/projects/hill/runs/r1/turns/", params)
    assert response.status_code == 400
    assert "could not be read" in response.content.decode()


def test_partials_check_access(client, carol, victor, project):
    push(project, "r1", turn(0, 0), {"type": "metric", "key": "loss", "step": 1, "value": 1.0})
    pk = Run.objects.get(external_id="r1").turns.get().pk
    origin = quote(T0.isoformat())
    urls = [
        f"/projects/hill/runs/r1/turns/{pk}/",
        "/projects/hill/runs/r1/metrics/?key=loss",
        f"/projects/hill/runs/r1/turns/?origin={origin}&width_us=1000&bin=0",
        "/projects/hill/chart/",
    ]
    client.force_login(carol)
    assert [client.get(u).status_code for u in urls] == [404] * 4
    client.force_login(victor)
    assert [client.get(u).status_code for u in urls] == [200] * 4
    client.logout()
    assert all(client.get(u).status_code == 302 for u in urls)


# --- metrics -------------------------------------------------------------------------------------------


def test_metric_chart_is_downsampled_with_a_min_max_band(client_alice, project):
    push(
        project,
        "r1",
        *[{"type": "metric", "key": "loss", "step": i, "value": 1 / (i + 1)} for i in range(5000)],
    )
    push(project, "r1", {"type": "metric", "key": "acc", "step": 1, "value": 0.5})
    body = client_alice.get("/projects/hill/runs/r1/").content.decode()
    fig = figure(body, "metric-data")  # the first key, alphabetically
    assert fig["data"][-1]["name"] == "acc"
    response = client_alice.get("/projects/hill/runs/r1/metrics/", {"key": "loss"})
    fig = figure(response.content.decode(), "metric-data")
    mean = fig["data"][-1]
    assert len(mean["x"]) <= 1000
    band_hi, band_lo = fig["data"][0], fig["data"][1]
    assert max(band_hi["y"]) == 1.0  # the extremes survive as the band's edges
    assert min(band_lo["y"]) == pytest.approx(1 / 5000)
    assert all(lo <= m <= hi for lo, m, hi in zip(band_lo["y"], mean["y"], band_hi["y"], strict=True))
    assert "5000 points stored, shown as" in response.content.decode()


@pytest.mark.parametrize("x", ["usd", "tokens", "turns", "time"])
def test_the_metric_panel_against_spend_ends_at_the_runs_own_total(client_alice, project, x):
    """Issue 38: the run page's metric panel draws a metric against any axis Compare has; on a spend axis
    each point sits at what the run had spent by then (driver and child work), up to its own total."""
    events = []
    for i in range(12):
        ts = (T0 + timedelta(seconds=10 * i)).isoformat()
        child = {"actor": "w", "parent_actor": "driver"} if i % 3 == 0 else {}
        events.append(
            {
                "id": f"t{i}",
                "type": "agent.turn",
                "turn": i,
                "ts": ts,
                "tokens_in": 100,
                "tokens_out": 10,
                "cost_usd": 0.5,
                **child,
            }
        )
        events.append({"type": "metric", "key": "loss", "step": i, "value": 1 / (i + 1), "ts": ts})
    push(project, "r1", *events)
    run = Run.objects.get(external_id="r1")
    response = client_alice.get(
        "/projects/hill/runs/r1/metrics/", {"key": "loss", "x": x}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200
    html = response.content.decode()
    fig = figure(html, "metric-data")
    xs = [v for trace in fig["data"] for v in trace["x"]]
    ys = [v for trace in fig["data"] for v in trace["y"]]
    total = {"usd": float(run.cost_usd), "tokens": run.tokens_in + run.tokens_out, "turns": run.turn_count}
    if x in total:
        assert max(xs) == pytest.approx(total[x])  # the run's own total
        per_turn = {"usd": 0.5, "tokens": 110, "turns": 1}[x]
        assert xs[0] == pytest.approx(per_turn)  # the first point: after the first turn
    else:
        assert xs[0] == pytest.approx(0) and max(xs) == pytest.approx(110)
    assert ys[0] == pytest.approx(1.0)
    assert "12 points stored, against" in html
    # the key picker and the axis picker carry each other
    page = client_alice.get("/projects/hill/runs/r1/", {"x": x}).content.decode()
    assert re.search(rf'<option value="{x}" selected>', page)


def test_unknown_metric_key_is_a_404_panel(client_alice, project):
    push(project, "r1", {"type": "metric", "key": "loss", "step": 1, "value": 1.0})
    response = client_alice.get("/projects/hill/runs/r1/metrics/", {"key": "<nope>"})
    assert response.status_code == 404
    assert "No metric <code>&lt;nope&gt;</code>" in response.content.decode()


# --- polling -------------------------------------------------------------------------------------------


def test_a_poll_that_already_shows_the_latest_versions_gets_204(client_alice, project):
    push(project, "r1", turn(0, 0))
    page = client_alice.get("/projects/hill/runs/r1/").content.decode()
    shown = cards_of(page)
    assert {"run-head", "run-stats", "turns-card", "run-timeline-card", "run-poll"} <= set(shown)
    same = client_alice.get("/projects/hill/runs/r1/", headers=poll_headers(shown))
    assert same.status_code == 204 and same.content == b""
    push(project, "r1", turn(1, 1))
    changed = client_alice.get("/projects/hill/runs/r1/", headers=poll_headers(shown))
    assert changed.status_code == 200
    assert 'data-turn="1"' in changed.content.decode()
    # A full page load never answers 204, whatever it sends.
    assert client_alice.get("/projects/hill/runs/r1/", headers={live.CARDS_HEADER: "x=y"}).status_code == 200


def test_project_and_overview_polls_also_answer_204_when_nothing_changed(client_alice, project):
    push(project, "r1", score(0.5, 0))
    for url in ["/", "/projects/hill/", "/projects/hill/chart/"]:
        first = client_alice.get(url, headers={"HX-Request": "true"}).content.decode()
        if "data-cards-poll" in first:  # the project page's runs block is a live card
            headers = poll_headers(cards_of(first))
        else:
            headers = {
                "HX-Request": "true",
                VERSION_HEADER: re.search(r'"X-Smrweb-Version": "([0-9a-f]+)"', first)[1],
            }
        assert client_alice.get(url, headers=headers).status_code == 204
        push(project, "r2", score(0.1, 1) | {"ts": datetime.now(UTC).isoformat()})
        assert client_alice.get(url, headers=headers).status_code == 200


def test_runtime_messages_keep_the_kickoff_in_view(client_alice, project):
    kickoff = {"topic": "smr.trigger.initial_runtime_message"}
    push(
        project,
        "r1",
        *[
            {"type": "message", "body": f"message number {i}.", "ts": at(i), **(kickoff if i == 0 else {})}
            for i in range(30)
        ],
    )
    body = client_alice.get("/projects/hill/runs/r1/").content.decode()
    assert "message number 29." in body and "message number 0." in body
    # The newest twenty (10 to 29) and the first; nothing between.
    assert (
        "message number 10." in body and "message number 9." not in body and "message number 5." not in body
    )
    assert (
        body.index("message number 29.") < body.index("message number 10.") < body.index("message number 0.")
    )
    assert body.count("badge-kickoff") == 1


def test_runtime_messages_are_labelled_by_what_they_are_and_a_long_one_opens_whole(client_alice, project):
    """The walkthrough: a harness's rollback notice, the first message, was labelled "kickoff"; and the
    kickoff was cut at "…" with its full text only on the launch page."""
    kickoff = "Carry forward: " + " ".join(f"step {i} tried lr 1e-{i % 5}." for i in range(120)) + " THE END"
    push(
        project,
        "r1",
        {"type": "message", "topic": "harness.rollback", "body": "Rolled back to #3.", "ts": at(0)},
        {"type": "message", "topic": "smr.trigger.initial_runtime_message", "body": kickoff, "ts": at(1)},
        {"type": "message", "body": "halve the lr", "ts": at(2)},
    )
    body = client_alice.get("/projects/hill/runs/r1/").content.decode()
    rows = dict(
        re.findall(
            r'data-message-kind="(\w+)" id="message-\d+">.*?<span class="topic"[^>]*>#(\d+)', body, re.S
        )
    )
    assert rows == {"rollback": "1", "kickoff": "2"}  # the first is the rollback notice, by its topic
    assert body.count("badge-kickoff") == 1 and body.count('class="badge badge-rollback"') == 1
    full = body.split('<details class="body message-full">', 1)[1].split("</details>", 1)[0]
    assert "THE END" in full and f"full text ({len(kickoff):,} characters)" in full
    assert "halve the lr</div>" in body  # a short one as it is


# --- project chart -------------------------------------------------------------------------------------


def test_project_chart_overlays_runs_and_steps_the_best_so_far(client_alice, project):
    push(project, "a", score(0.2, 0), score(0.5, 10))
    push(project, "b", score(0.4, 5), score(0.3, 15), score(0.9, 20))
    fig = figure(client_alice.get("/projects/hill/?unverified=1").content.decode(), "project-chart-data")
    runs = {t["name"]: t for t in fig["data"] if t["name"] != "project best so far"}
    assert set(runs) == {"a", "b"}
    assert runs["b"]["y"] == [0.4, 0.3, 0.9]
    assert runs["a"]["meta"]["url"] == "/projects/hill/runs/a/"
    best = next(t for t in fig["data"] if t["name"] == "project best so far")
    assert best["y"] == [0.2, 0.4, 0.5, 0.9, 0.9]
    assert best["line"]["shape"] == "hv"
    # Verified only (the default): the 0.9 failed verification, 0.4 and 0.5 passed; every run's line stays.
    by_score = {s.score: s for s in Submission.objects.all()}
    Submission.objects.filter(pk__in=[by_score[0.4].pk, by_score[0.5].pk]).update(status="verified")
    Submission.objects.filter(pk=by_score[0.9].pk).update(status="invalid")
    fig = figure(client_alice.get("/projects/hill/?unverified=0").content.decode(), "project-chart-data")
    best = next(t for t in fig["data"] if t["name"] == "project best so far (verified)")
    assert best["y"] == [0.4, 0.5, 0.5]
    assert {t["name"] for t in fig["data"]} == {"a", "b", "project best so far (verified)"}
    # An excluded run is gone from the chart and from the best.
    submissions.exclude_run(
        Run.objects.get(external_id="a"), by=User.objects.get(username="alice"), reason="test"
    )
    fig = figure(client_alice.get("/projects/hill/").content.decode(), "project-chart-data")
    assert {t["name"] for t in fig["data"]} == {"b", "project best so far (verified)"}
    assert next(t for t in fig["data"] if t["name"].startswith("project best"))["y"] == [0.4, 0.4]


def test_project_chart_downsamples_but_keeps_every_record(project):

    for r in range(4):
        events = [score((i * 7919 % 1000) / 1000 + r, i * 0.01) for i in range(6000)]
        push(project, f"r{r}", *events[:3000])
        push(project, f"r{r}", *events[3000:])
    result = summary_reference.project_scores(project, max_points=2000, unverified=True)
    assert result.total == 24_000
    assert sum(len(p) for p in result.series.values()) <= 2000 + len(result.frontier)
    assert (
        result.frontier[-1][1] == max(s for p in result.series.values() for _, s in p) == pytest.approx(3.999)
    )
    values = [v for _, v in result.frontier]
    assert values == sorted(values) and len(set(values)) == len(values)


def test_project_page_has_compare_checkboxes_for_each_run(client_alice, project):
    push(project, "a", score(0.2, 0))
    push(project, "b:x@1", score(0.4, 5))
    body = client_alice.get("/projects/hill/").content.decode()
    assert 'data-pick="a"' in body and 'data-pick="b:x@1"' in body
    assert 'data-compare-link="hill"' in body and 'data-href="/projects/hill/compare/"' in body


@pytest.mark.parametrize(
    "query",
    [
        "origin=2026-01-01T00:00:00Z&width_us=999999999999999999&bin=10000000",  # OverflowError
        "origin=2026-01-01T00:00:00Z&width_us=100000000000000000000&bin=0",  # days out of range
        "origin=2026-13-45T00:00:00Z&width_us=1000000&bin=0",  # month 13
        "origin=9999-12-31T23:59:59Z&width_us=86400000000&bin=1",  # past the calendar
        "origin=0001-01-01T00:00:00%2B14:00&width_us=1000000&bin=0",  # before it, in UTC
        "origin=2026-01-01T00:00:00Z&width_us=-5&bin=0",
        "origin=2026-01-01T00:00:00Z&width_us=1000000&bin=-1",
        "origin=2026-01-01T00:00:00Z&width_us=x&bin=0",
        "origin=&width_us=1000000&bin=0",
    ],
)
def test_the_turns_bar_refuses_what_the_red_team_sent_with_400(client_alice, project, query):
    """Red-team finding 8: each of these answered 500."""
    services.ingest_events(project, "r1", parse_events(b'[{"type": "state", "state": "running"}]'))
    response = client_alice.get(f"/projects/hill/runs/r1/turns/?{query}")
    assert response.status_code == 400 and "That bar could not be read" in response.content.decode()


def test_the_budget_line_sits_inside_its_panel_with_a_label(client_alice, project):
    """It sat on the USD-total panel's top edge and looked like it floated between panels (walkthrough P3)."""
    services.update_run_settings(project, "r", budget_usd=Decimal("25"))
    push(project, "r", {"type": "agent.turn", "turn": 1, "cost_usd": 4.0, "tokens_in": 10})
    fig = figure(client_alice.get("/projects/hill/runs/r/").content.decode(), "run-timeline-data")
    assert fig["layout"]["yaxis4"]["range"] == [0, pytest.approx(25 * 1.18)]
    [label] = [a for a in fig["layout"]["annotations"] if a["text"] == "budget $25.00"]
    assert label["yref"] == "y4" and label["y"] == 25.0
