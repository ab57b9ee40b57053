"""Issue 33 part 2, "valid everywhere, one rule": every figure and table cell that shows a score reads the
rule the cards read (`counted_q` / `standing` in tracking.models.submission), and a score that does not
count is drawn hollow with why, never dropped and never on a best line.

One run of a minimize scenario replays the walkthrough's P0-A with every kind of score: 3.30 (invalid),
3.45 (verified), 3.80 (a candidate), 3.10 (verified, then excluded by an admin) and 3.05 (invalid, the
newest). The expected values are built from the domain rule over the database, then compared with what
each page renders: the plotly JSON embedded in the run page, the project page, the compare page, the SVG
sparklines and the table cells, the knowledge block and the API's run fields."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from html import unescape

import pytest

from smrweb.tracking import queries, services
from smrweb.tracking.models import (
    RUN_RULE,
    Direction,
    Run,
    Submission,
    SubmissionStatus,
    counted_q,
    standing,
)
from smrweb.tracking.queries import timeline
from smrweb.tracking.services import knowledge
from smrweb.tracking.services import submissions as lifecycle
from tests.factories import admin_project, push

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 28, 13, 0, tzinfo=UTC)
# (minutes after T0, score, what becomes of it)
SCORES = [
    (1, 3.30, "invalid"),
    (4, 3.45, "verified"),
    (6, 3.80, "candidate"),
    (8, 3.10, "excluded"),
    (9, 3.05, "invalid"),
]


def at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat()


def verify(sub, by, *, passed: bool) -> None:
    lifecycle.request_verification(sub, by=by)
    outcome = "passed" if passed else "failed"
    lifecycle.record_verification(
        sub.pk, lifecycle.VerificationResult(outcome, 0 if passed else 1, "", outcome)
    )


@pytest.fixture
def opt(alice, bob):
    scenario = services.create_scenario(key="val-loss", name="Val loss", direction=Direction.MINIMIZE)
    project = admin_project("opt", scenario=scenario, by=alice)
    services.add_member(project, bob, role="reviewer")
    services.update_project(project, regression_threshold=0.15, by=alice)
    return project


@pytest.fixture
def p0a(opt, alice, bob):
    """The run, its scores in their final states, a turn between each (so efficiency has spend), and a
    second run (steady, all verified) for Compare."""
    events = []
    for i, (minutes, value, _) in enumerate(SCORES):
        events.append(
            {
                "type": "agent.turn",
                "turn": i + 1,
                "cost_usd": 0.01,
                "tokens_in": 1000,
                "ts": at(minutes - 0.5),
            }
        )
        events.append({"type": "score", "score": value, "ts": at(minutes), "id": f"s{i}"})
    push(opt, "ux-regress-1", {"type": "state", "state": "running", "ts": at(0)}, *events)
    subs = list(Submission.objects.filter(run__external_id="ux-regress-1").order_by("ts"))
    for sub, (_, _, fate) in zip(subs, SCORES, strict=True):
        if fate == "invalid":
            verify(sub, bob, passed=False)
        elif fate in ("verified", "excluded"):
            verify(sub, bob, passed=True)
        if fate == "excluded":
            lifecycle.exclude_submission(Submission.objects.get(pk=sub.pk), by=alice, reason="a test harness")
    push(opt, "steady", *[{"type": "score", "score": v, "ts": at(m)} for m, v in ((2, 3.9), (5, 3.7))])
    for sub in Submission.objects.filter(run__external_id="steady"):
        verify(sub, bob, passed=True)
    return Run.objects.get(external_id="ux-regress-1")


# --- what the rule says ---------------------------------------------------------------------------


def rows(run: Run):
    return list(run.submissions.order_by("ts", "id"))


def counted(run: Run, **rule) -> list[float]:
    """The run's scores that count under `rule`, in time order, from the rule's SQL form."""
    return list(
        run.submissions.filter(counted_q(**rule)).order_by("ts", "id").values_list("score", flat=True)
    )


def why(sub: Submission, **rule) -> str:
    return standing(
        sub.status, sub.excluded_at is not None, run_excluded=sub.run.excluded_at is not None, **rule
    )


def frontier(values: list[float]) -> list[float]:
    out: list[float] = []
    for v in values:
        if not out or v < out[-1]:  # minimize
            out.append(v)
    return out


def test_the_rule_in_sql_and_for_one_row_agree(p0a):
    for rule in ({"unverified": True, "of_run": True}, {"unverified": True}, {"unverified": False}):
        in_sql = set(p0a.submissions.filter(counted_q(**rule)).values_list("pk", flat=True))
        by_row = {s.pk for s in rows(p0a) if not why(s, **rule)}
        assert in_sql == by_row, rule
    # The fixture is what the walkthrough describes, and the rule reads it so.
    assert [s.status for s in rows(p0a)] == ["invalid", "verified", "candidate", "verified", "invalid"]
    assert counted(p0a, **RUN_RULE) == [3.45, 3.80]
    assert counted(p0a) == [3.45]  # the project's rule: verified ones only
    assert [why(s) for s in rows(p0a)] == ["invalid", "", "candidate", "excluded", "invalid"]


# --- every figure, against the rule ---------------------------------------------------------------


def plotly(body: str, script_id: str) -> dict:
    match = re.search(rf'<script id="{script_id}" type="application/json">(.*?)</script>', body, re.DOTALL)
    assert match, f"no {script_id} in the page"
    return json.loads(match.group(1))


def num(text: str) -> float:
    return float(re.sub(r"[^\d.\-−]", "", text).replace("−", "-"))


def test_the_run_page_timeline_stats_and_efficiency_read_the_rule(client_alice, p0a):
    body = client_alice.get("/projects/opt/runs/ux-regress-1/").content.decode()
    fig = plotly(body, "run-timeline-data")
    by_name = {t["name"]: t for t in fig["data"] if t.get("yaxis") == "y"}
    run_counted = counted(p0a, **RUN_RULE)
    # The dots that count, the hollow ones with why, the best-so-far line of the counted ones only.
    assert by_name[p0a.project.scenario.score_metric]["y"] == run_counted
    void = by_name["not counted"]
    assert void["marker"]["symbol"] == "circle-open"
    assert void["y"] == [s.score for s in rows(p0a) if why(s, **RUN_RULE)]
    assert [re.search(r"<b>(.*?)</b>", c)[1] for c in void["customdata"]] == [
        why(s, **RUN_RULE) for s in rows(p0a) if why(s, **RUN_RULE)
    ]
    best_line = frontier(run_counted)
    assert by_name["best so far"]["y"] == [*best_line, best_line[-1]] == [3.45, 3.45]  # not 3.30, not 3.10
    # The cards: best and latest by the same rule; the newer scores that do not count marked beside it.
    stat = re.search(r'data-stat="best">(.*?)</div>', body)[1]
    assert num(stat) == p0a.best_score == min(run_counted)
    latest = re.search(r'data-stat="latest">(.*?)</div>', body, re.DOTALL)[1]
    assert num(latest.split("<span")[0]) == p0a.latest_score == run_counted[-1]
    assert 'data-newer-not-counted="2"' in latest and "+2 not counted" in latest
    # Efficiency starts at the first score that counts (3.45), not the invalid 3.30 (the walkthrough's −3/$).
    eff = timeline.efficiency(p0a)
    assert eff.first_score == run_counted[0] and eff.gained == 0
    assert f"from {run_counted[0]:g} to {min(run_counted):g} for" in unescape(body)


def test_the_project_page_table_sparkline_and_chart_read_the_rule(client_alice, p0a):
    body = client_alice.get("/projects/opt/").content.decode()
    row = body.split('data-run="ux-regress-1"')[1].split("</tr>")[0]
    run_counted = counted(p0a, **RUN_RULE)
    latest = re.search(r"<td[^>]*data-latest>(.*?)</td>", row, re.DOTALL)[1]
    assert num(latest.split("<span")[0]) == run_counted[-1]
    assert "+2 not counted" in latest
    assert num(re.search(r"<td[^>]*data-best><b>(.*?)</b>", row)[1]) == min(run_counted)
    # The runs table's sparkline: the run's rule; hollow dots for the scores that do not count, with why.
    spark = re.search(r'<svg class="spark".*?</svg>', row, re.DOTALL)[0]
    assert re.findall(r'data-why="([^"]+)"', spark) == [
        why(s, **RUN_RULE) for s in rows(p0a) if why(s, **RUN_RULE)
    ]
    assert f"best of these {min(run_counted):g}" in spark and f"latest counted {run_counted[-1]:g}" in spark
    # The project chart: the project's rule (verified ones), then with unverified ones.
    for query, rule in (("", {"unverified": False}), ("?unverified=1", {"unverified": True})):
        page = client_alice.get(f"/projects/opt/{query}").content.decode()
        fig = plotly(page, "project-chart-data")
        traces = [t for t in fig["data"] if t.get("meta", {}).get("run") == "ux-regress-1"]
        line, void = traces[0], traces[1]
        assert line["y"] == counted(p0a, **rule)
        assert void["marker"]["symbol"] == "circle-open"
        assert void["y"] == [s.score for s in rows(p0a) if why(s, **rule)]
        assert [re.search(r"<b>(.*?)</b>", c)[1] for c in void["customdata"]] == [
            why(s, **rule) for s in rows(p0a) if why(s, **rule)
        ]
        best = [t for t in fig["data"] if "best so far" in t["name"]][0]
        every = Submission.objects.filter(project=p0a.project).filter(counted_q(**rule)).order_by("ts", "id")
        records = frontier(list(every.values_list("score", flat=True)))
        assert best["y"] == [*records, records[-1]]


def test_the_overview_sparkline_says_it_is_a_window_and_reads_the_headline_rule(client_alice, p0a):
    body = client_alice.get("/").content.decode()
    card = body.split('href="/projects/opt/"')[1]
    spark = re.search(r'<svg class="spark".*?</svg>', card, re.DOTALL)[0]
    every = list(Submission.objects.filter(project=p0a.project).order_by("ts", "id"))
    assert re.findall(r'data-why="([^"]+)"', spark) == [why(s) for s in every if why(s)]
    counted_values = [s.score for s in every if not why(s)]
    assert f"the newest {queries.SPARK_SCORES} scores of every run" in spark
    assert f"best of these {min(counted_values):g}" in spark
    headline = re.search(r"data-best>.*?>([\d.]+)</a>", card, re.DOTALL)[1]
    assert float(headline) == min(counted_values)


def test_compare_charts_and_table_read_the_rule(client_alice, p0a):
    body = client_alice.get("/projects/opt/compare/?runs=steady&runs=ux-regress-1").content.decode()
    fig = plotly(body, "compare-score-data")
    mine = [t for t in fig["data"] if t["name"] == "ux-regress-1"]
    dots, steps, void = mine
    run_counted = counted(p0a, **RUN_RULE)
    assert dots["y"] == run_counted
    changes = [y for i, y in enumerate(steps["y"]) if i == 0 or y != steps["y"][i - 1]]
    assert changes == frontier(run_counted)  # the step line's levels: the records of the counted scores
    assert void["marker"]["symbol"] == "circle-open"
    assert void["y"] == [s.score for s in rows(p0a) if why(s, **RUN_RULE)]
    assert void["customdata"] == [why(s, **RUN_RULE) for s in rows(p0a) if why(s, **RUN_RULE)]
    row = body.split('<tr data-run="ux-regress-1"')[1].split("</tr>")[0]
    assert num(re.search(r"data-final>([^<]*)<", row)[1]) == run_counted[-1]
    assert num(re.search(r"data-best><b[^>]*>([^<]*)</b>", row)[1]) == min(run_counted)
    assert f"from the first score that counts {run_counted[0]:g} to the best" in unescape(row)


def test_knowledge_figures_read_the_rule_and_name_submissions_by_number(client_alice, alice, bob, p0a):
    cf = queries.carry_forward(p0a.project)
    best = Submission.objects.filter(project=p0a.project).counted().order_by("score").first()
    assert (cf.best.submission_id, cf.best.score) == (best.pk, best.score)
    # The regression of 3.80 is measured against the run's best that counted then (3.45), not 3.30.
    regressed = [i for i in cf.failed if "regressed" in i.reasons]
    assert [i.score for i in regressed] == [3.80] and "(3.45)" in regressed[0].why
    # The invalid ones are failed approaches, each with its own score; the excluded one is nowhere.
    assert sorted(i.score for i in cf.failed if "invalid" in i.reasons) == [3.05, 3.30]
    assert all(i.score != 3.10 for i in cf.failed)
    # An arena entry names its submission by number (the walkthrough's "submission 1218" was a score).
    knowledge.add_entry(p0a.project, by=alice, kind="arena_delta", title="ranked 9", submission=best)
    body = client_alice.get("/projects/opt/knowledge/").content.decode()
    link = re.search(r"<a [^>]*data-entry-submission[^>]*>(.*?)</a>", body, re.DOTALL)[1]
    assert link.strip() == f"submission #{best.pk}"
    assert f"(submission #{best.pk}, score 3.45, from run ux-regress-1)" in unescape(body)


def test_a_failed_runs_score_is_the_same_in_the_table_and_the_block(client_alice, opt, bob):
    push(
        opt,
        "broken",
        {"type": "score", "score": 3.2, "ts": at(1)},
        {"type": "state", "state": "failed", "ts": at(2)},
    )
    body = unescape(client_alice.get("/projects/opt/knowledge/").content.decode())
    assert "its best score 3.2, run broken" in body
    cell = re.search(r"<a[^>]*data-run-best[^>]*>([^<]*)</a>", body)
    assert cell and num(cell[1]) == Run.objects.get(external_id="broken").best_score == 3.2


def test_the_api_run_fields_read_the_rule(client_alice, p0a):
    token = services.create_api_token(p0a.project, name="ci")[1]
    data = client_alice.get(
        "/api/v1/projects/opt/runs/ux-regress-1", HTTP_AUTHORIZATION=f"Bearer {token}"
    ).json()
    run_counted = counted(p0a, **RUN_RULE)
    assert (data["best_score"], data["latest_score"]) == (min(run_counted), run_counted[-1]) == (3.45, 3.80)
    assert data["score_count"] == len(SCORES)
    listed = client_alice.get(
        "/api/v1/projects/opt/runs?sort=run", HTTP_AUTHORIZATION=f"Bearer {token}"
    ).json()
    row = next(r for r in listed["results"] if r["external_id"] == "ux-regress-1")
    assert (row["best_score"], row["latest_score"]) == (3.45, 3.80)


def test_a_status_change_moves_the_run_pages_cards_and_chart(client_alice, opt, bob):
    """The cards are kept by version: a score found invalid after it was drawn must leave the best line."""
    push(
        opt, "r", {"type": "score", "score": 3.3, "ts": at(1)}, {"type": "score", "score": 3.45, "ts": at(2)}
    )
    first = plotly(client_alice.get("/projects/opt/runs/r/").content.decode(), "run-timeline-data")
    assert [t for t in first["data"] if t["name"] == "best so far"][0]["y"] == [3.3, 3.3]
    verify(Submission.objects.get(score=3.3), bob, passed=False)
    then = plotly(client_alice.get("/projects/opt/runs/r/").content.decode(), "run-timeline-data")
    assert [t for t in then["data"] if t["name"] == "best so far"][0]["y"] == [3.45, 3.45]
    assert Submission.objects.get(score=3.3).status == SubmissionStatus.INVALID
