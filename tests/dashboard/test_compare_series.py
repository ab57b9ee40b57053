"""Compare's "any metric against spend" card: the metric and axis in the URL, the figure's traces ending at
each run's own spend, the card alone for htmx, runs of other projects where the viewer can read them."""

from __future__ import annotations

import json
import re

import pytest

from smrweb.tracking.models import Run
from tests.api.test_compare_series import climb
from tests.factories import admin_project

pytestmark = pytest.mark.django_db

PAGE = "/projects/hill/compare/"
CARD = {"HX-Request": "true", "X-Smrweb-Only": "series"}


def card(client, params) -> str:
    """The card as the page loads it after itself (its own request: the comparison stays incremental)."""
    answer = client.get(PAGE, params, headers=CARD)
    assert answer.status_code == 200
    return answer.content.decode()


def figure_of(html: str) -> dict:
    found = re.search(r'<script id="compare-series-data" type="application/json">(.*?)</script>', html, re.S)
    assert found, "no series figure"
    return json.loads(found.group(1))


@pytest.fixture
def runs(project):
    return [climb(project, f"r{i}", turns=30 + 10 * i, cost=0.01 * (i + 1), seed=i) for i in range(3)]


def test_the_card_draws_the_chosen_metric_against_usd_and_each_line_reaches_its_runs_spend(
    client_alice, runs
):
    page = client_alice.get(PAGE, {"runs": ["r0", "r1", "r2"], "metric": "loss", "x": "usd"}).content.decode()
    assert 'hx-trigger="load"' in page.split('id="compare-series"')[1].split(">")[0]
    html = card(client_alice, {"runs": ["r0", "r1", "r2"], "metric": "loss", "x": "usd"})
    assert 'id="compare-series"' in html and '<option value="loss" selected>' in html
    assert '<option value="usd" selected>' in html
    figure = figure_of(html)
    ends = {}
    for trace in figure["data"]:
        ends[trace["name"]] = max(ends.get(trace["name"], 0), max(trace["x"]))
    for run in Run.objects.filter(external_id__in=["r0", "r1", "r2"]):
        assert ends[run.external_id] == pytest.approx(float(run.cost_usd), rel=1e-6)
    assert "USD spent" in figure["layout"]["xaxis"]["title"]["text"]


def test_the_default_is_the_score_against_usd_with_its_best_so_far(client_alice, runs):
    html = card(client_alice, {"runs": ["r0", "r1"]})
    figure = figure_of(html)
    assert '<option value="score" selected>' in html
    shapes = [t.get("line", {}).get("shape") for t in figure["data"]]
    assert shapes.count("hv") == 2  # a best-so-far step line per run


def test_htmx_gets_the_card_alone_and_bad_values_fall_back(client_alice, runs):
    answer = client_alice.get(
        PAGE,
        {"runs": ["r0", "r1"], "metric": "loss", "x": "furlongs"},
        headers={"HX-Request": "true", "X-Smrweb-Only": "series"},
    )
    html = answer.content.decode()
    assert answer.status_code == 200 and html.lstrip().startswith('<section class="card" id="compare-series"')
    assert '<option value="usd" selected>' in html and "Compare runs" not in html
    nothing = card(client_alice, {"runs": ["r0", "r1"], "metric": "accuracy"})
    assert "None of these runs has a point of <code>accuracy</code>" in nothing
    assert "accuracy (not logged)" in nothing


def test_runs_of_another_readable_project_join_the_card_not_the_missing_list(
    client_alice, alice, carol, runs
):
    mine = admin_project("mine", by=alice)
    climb(mine, "m1", turns=20, cost=0.05, seed=11)
    theirs = admin_project("theirs", by=carol)
    climb(theirs, "t1", turns=20, cost=0.05, seed=12)
    params = {"runs": ["r0", "r1", "mine:m1", "theirs:t1"], "x": "turns"}
    html = card(client_alice, params)
    names = {t["name"] for t in figure_of(html)["data"]}
    assert names == {"r0", "r1", "mine:m1"}
    page = client_alice.get(PAGE, params).content.decode()
    missing = page.split('id="compare-missing"')[1].split("</div>")[0]
    assert "theirs:t1" in missing and "mine:m1" not in missing
    assert "With runs of <b>mine</b>" in html and "with 1 run of other projects" in page


def test_the_picker_keeps_runs_of_other_projects_in_its_text_box(client_alice, alice, runs):
    mine = admin_project("mine", by=alice)
    climb(mine, "m1", turns=20, cost=0.05, seed=11)
    params = {"runs": ["r0", "r1", "mine:m1"]}
    pick = client_alice.get(PAGE, params, headers={"HX-Request": "true", "X-Smrweb-Only": "pick"})
    html = pick.content.decode()
    box = re.search(r'<input type="text" name="runs" value="([^"]*)"', html)
    assert box and box.group(1) == "mine:m1"
    assert re.findall(r'name="runs" value="(r\d)" checked', html) == ["r0", "r1"]
    # what the form sends again (the ticked runs and the box, comma-separated) compares the same runs
    again = card(client_alice, {"runs": ["r0", "r1", "mine:m1, "]})
    assert {t["name"] for t in figure_of(again)["data"]} == {"r0", "r1", "mine:m1"}
    # with fewer than two runs of this project, the picker is on the page itself and keeps the box too
    alone = client_alice.get(PAGE, {"runs": ["r0", "mine:m1"]}).content.decode()
    assert 'name="runs" value="mine:m1"' in alone


def test_arms_draw_a_median_line_each_with_their_table_and_say_whether_they_differ(client_alice, project):
    from tests.api.test_compare_arms import arm_run

    fast = [arm_run(project, f"f{i}", level=0.8, cost=0.01, seed=i, params={"lr": "0.01"}) for i in range(5)]
    slow = [
        arm_run(project, f"s{i}", level=0.2, cost=0.03, seed=9 + i, params={"lr": "0.003"}) for i in range(5)
    ]
    names = [r.external_id for r in fast + slow]
    html = card(client_alice, {"runs": names, "group": "param:lr"})
    assert '<option value="param:lr" selected>' in html
    found = re.search(r'<script id="compare-arms-data" type="application/json">(.*?)</script>', html, re.S)
    medians = [t for t in json.loads(found.group(1))["data"] if t.get("showlegend", True)]
    assert sorted(t["name"] for t in medians) == ["0.003 (n=5)", "0.01 (n=5)"]
    table = html.split('id="arms-table"')[1].split("</table>")[0]
    assert table.count("<tr>") == 3 and "<b>0.01</b>" in table and "<b>0.003</b>" in table
    said = html.split('id="arm-differences"')[1].split("</ul>")[0]
    assert "<b>0.01</b> is ahead of <b>0.003</b> at $0.20 spent:" in said  # the fast arm's median run's end
    assert re.search(r"by 0\.6\d+ \(95 % interval 0\.6\d+ to 0\.6\d+\)", said), said
    assert "they rank this far apart 0.8% of the time" in said  # 2 of the 252 ways to split 10 runs


def test_a_grouping_that_cannot_be_drawn_is_said_in_the_card(client_alice, runs):
    html = card(client_alice, {"runs": ["r0", "r1"], "group": "colour"})
    assert 'id="series-group-error"' in html and "Unknown grouping" in html
    assert 'id="compare-series-data"' in html  # the runs are still drawn, one line each


def test_the_card_with_arms_costs_the_same_queries_for_4_runs_and_for_16(client_alice, project):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.api.test_compare_arms import arm_run

    def queries(n: int) -> int:
        names = [f"q{n}-{i}" for i in range(n)]
        for i, name in enumerate(names):
            arm_run(project, name, level=0.5, cost=0.01, seed=i, tags={"model": "ab"[i % 2]})
        card(client_alice, {"runs": names, "group": "tag:model"})  # nothing kept yet: read, then kept
        with CaptureQueriesContext(connection) as q:
            card(client_alice, {"runs": names, "group": "tag:model"})
        return len(q)

    assert queries(4) == queries(16)
