"""The Compare page: values and deltas, chart JSON, downsampling caps, flat query counts, access and
the designed states (too many, unknown, too few, hostile ids)."""

import json
import re
from datetime import UTC, datetime, timedelta
from html import unescape

import pytest
from django.utils import timezone

from smrweb.core import numbers
from smrweb.dashboard.charts import compare as compare_charts  # beside tracking.queries.compare
from smrweb.dashboard.charts import style
from smrweb.dashboard.views import compare as compare_views
from smrweb.tracking import services
from smrweb.tracking.models import Direction, Run
from smrweb.tracking.queries import compare
from tests.factories import admin_project, push

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 1, 1, tzinfo=UTC)
URL = "/projects/hill/compare/"


def at(**delta) -> str:
    return (T0 + timedelta(**delta)).isoformat()


def score(value, **delta):
    return {"type": "score", "score": value, "ts": at(**delta)}


def turn(n, cost, *, actor="driver", tokens_in=1000, tokens_out=100, **delta):
    event = {
        "type": "agent.turn",
        "turn": n,
        "actor": actor,
        "cost_usd": cost,
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        "ts": at(**delta),
    }
    if actor != "driver":
        event["parent_actor"] = "driver"
    return event


def done(**delta):
    return {"type": "state", "state": "done", "ts": at(**delta)}


def query(*ids) -> str:
    return URL + "?" + "&".join(f"runs={i}" for i in ids)


def figure(body: str, name: str) -> dict:
    match = re.search(rf'<script id="{name}" type="application/json">(.*?)</script>', body, re.DOTALL)
    assert match, f"no {name} in the page"
    return json.loads(match.group(1))


def row(body: str, run_id: str) -> str:
    """The side-by-side table's row of one run."""
    return body.split(f'<tr data-run="{run_id}"')[1].split("</tr>")[0]


@pytest.fixture
def two_runs(project):
    # a (baseline): scores 0.2 → 0.5 → 0.4, a driver and a child turn ($0.75), done after 1.5 h.
    push(
        project,
        "a",
        score(0.2, minutes=0),
        score(0.5, minutes=30),
        score(0.4, minutes=60),
        turn(0, 0.25, tokens_in=1000, tokens_out=100, minutes=1),
        turn(0, 0.5, actor="w1", tokens_in=10, tokens_out=0, minutes=2),
        done(minutes=90),
    )
    # b: scores 0.1 → 0.9, one turn ($0.10), done after 30 min.
    push(
        project,
        "b",
        score(0.1, minutes=0),
        score(0.9, minutes=20),
        turn(0, 0.1, tokens_in=500, tokens_out=50, minutes=1),
        done(minutes=30),
    )


def test_two_runs_show_values_and_deltas_against_the_first(client_alice, two_runs):
    response = client_alice.get(query("a", "b"))
    assert response.status_code == 200
    a, b = response.context["comparison"].runs
    assert (a.first_score, a.run.best_score, a.run.latest_score) == (0.2, 0.5, 0.4)
    assert a.gain_per_usd == pytest.approx(0.3 / 0.75)  # (best − first) / USD
    assert b.gain_per_usd == pytest.approx(0.8 / 0.1)
    assert (a.duration, b.duration) == (timedelta(minutes=90), timedelta(minutes=30))
    assert a.deltas["final"] == 0 and b.deltas["final"] == pytest.approx(0.5)
    assert b.deltas["best"] == pytest.approx(0.4)
    assert b.deltas["turns"] == -1
    assert b.deltas["tokens"] == 550 - 1110
    assert b.deltas["usd"] == pytest.approx(-0.65)
    assert b.deltas["gain_per_usd"] == pytest.approx(8 - 0.4)
    assert b.deltas["duration"] == timedelta(minutes=-60)

    body = response.content.decode()
    base = row(body, "a")
    assert "baseline" in base and 'class="delta' not in base  # the baseline has no deltas
    assert (
        ">0.4<" in base
        and '<b title="reached 30m after the start">0.5</b>' in base
        and "$0.75" in base
        and ">1h 30m<" in base
        and ">0.4</span>" in base
    )
    other = row(body, "b")
    for text in (
        '<span class="delta good" title="+0.5 (+125%) against a">+0.5</span>',
        '<span class="delta good" title="+0.4 (+80%) against a">+0.4</span>',
        ">−1<",
        ">−560<",
        ">−$0.65<",
        ">+7.6<",
        ">−1h<",
        ">30m<",
        ">8</span>",
    ):
        assert text in other, text


def test_minimize_scenario_turns_gain_and_tones_around(client, alice, django_user_model):
    scenario = services.create_scenario(key="latency", name="Latency", direction=Direction.MINIMIZE)
    project = admin_project("fast", scenario=scenario, by=alice)
    push(project, "a", score(10, minutes=0), score(4, minutes=5), turn(0, 1.0, minutes=1))
    push(project, "b", score(10, minutes=0), score(6, minutes=5), turn(0, 1.0, minutes=1))
    client.force_login(alice)
    response = client.get("/projects/fast/compare/?runs=a&runs=b")
    a, b = response.context["comparison"].runs
    assert a.gain_per_usd == 6.0 and b.gain_per_usd == 4.0  # first − best when lower is better
    assert '<span class="delta bad" title="+2 (+50%) against a">+2</span>' in row(
        response.content.decode(), "b"
    )


def test_charts_are_json_with_a_trace_per_run_and_one_colour_per_run(client_alice, two_runs, project):
    push(project, "quiet", done(minutes=5))  # no scores, no turns
    body = client_alice.get(query("a", "b", "quiet")).content.decode()
    scores = figure(body, "compare-score-data")
    assert [t["name"] for t in scores["data"]] == ["a", "a", "b", "b"]  # dots + best-so-far per scored run
    dots, frontier = scores["data"][2], scores["data"][3]
    assert dots["y"] == [0.1, 0.9]
    assert frontier["line"]["shape"] == "hv" and frontier["y"] == [0.1, 0.9, 0.9]  # extended to the run's end
    assert frontier["x"] == [0, 20, 30]  # minutes since the run's start
    assert scores["layout"]["xaxis"]["title"]["text"].startswith("minutes")
    spend = figure(body, "compare-spend-data")
    assert [t["name"] for t in spend["data"]] == ["a", "b"]
    assert spend["data"][0]["y"] == [0, 0.25, 0.75, 0.75]  # from zero, cumulative, held to the run's end
    assert spend["data"][0]["x"] == [0, 1, 2, 90]
    turns = figure(body, "compare-turns-data")
    assert [t["name"] for t in turns["data"]] == [
        "driver inference USD",
        "child work USD",
        "tokens in / turn",
        "tokens out / turn",
    ]
    assert turns["data"][0]["y"] == ["a", "b"] and turns["data"][0]["x"] == [0.25, 0.1]
    assert turns["data"][1]["x"] == [0.5, 0]
    assert all(f["layout"]["uirevision"] == scores["layout"]["uirevision"] for f in (spend, turns))
    # The same colour for a run in every chart and in the table's swatch.
    colour_b = frontier["line"]["color"]
    assert spend["data"][1]["line"]["color"] == colour_b
    assert f'fill="{colour_b}"' in row(body, "b")
    assert colour_b != scores["data"][1]["line"]["color"]
    assert re.search(
        r'<div class="plot" data-plot="compare-score-data" role="img"\s+aria-label="score of 3 runs', body
    )
    assert "vendor/plotly.min.js" in body and "cdn" not in body.lower()


def test_charts_without_scores_or_turns_show_designed_empty_states(client_alice, project):
    push(project, "x", {"type": "state", "state": "running"})
    push(project, "y", {"type": "state", "state": "queued"})
    body = client_alice.get(query("x", "y")).content.decode()
    assert "None of these runs has a score yet" in body
    assert "None of these runs has an agent turn yet" in body
    assert 'id="compare-score-data"' not in body and 'id="compare-spend-data"' not in body


def test_long_series_are_downsampled_under_the_cap_and_keep_the_best(client_alice, project):
    n = 20_000
    spike = 12_345
    values = [round((i * 7919 % 1000) / 1000, 3) for i in range(n)]
    values[spike] = 9.5  # the best score, buried in the middle
    for lo in range(0, n, 5000):
        push(project, "long", *[score(values[i], seconds=i) for i in range(lo, lo + 5000)])
        push(project, "long", *[turn(i, 0.001, seconds=i) for i in range(lo, lo + 5000)])
    push(project, "long", done(seconds=n))
    push(project, "short", score(0.5, seconds=0), turn(0, 0.01, seconds=1), done(seconds=2))
    body = client_alice.get(query("long", "short")).content.decode()
    scores, spend = figure(body, "compare-score-data"), figure(body, "compare-spend-data")
    cap = compare.POINTS_PER_CHART
    assert 100 < compare_charts.points(scores) <= cap
    assert 100 < compare_charts.points(spend) <= cap
    long_dots, long_frontier = scores["data"][0], scores["data"][1]
    assert 9.5 in long_dots["y"]
    assert long_dots["x"][long_dots["y"].index(9.5)] == pytest.approx(spike / 3600, abs=1e-4)  # hours
    assert max(long_frontier["y"]) == 9.5 and long_frontier["y"] == sorted(long_frontier["y"])
    assert long_dots["y"][0] == values[0] and long_dots["y"][-1] == values[-1]  # first and last kept
    assert spend["data"][0]["y"][-1] == pytest.approx(n * 0.001)  # the total is exact, not sampled
    assert spend["data"][0]["line"]["shape"] == "linear"


def test_sql_thinning_keeps_first_last_and_best_and_an_exact_frontier(project):
    values = [0.3, 0.1, 0.8, 0.2, 0.2, 0.5, 0.8, 0.4, 0.9, 0.1, 0.6, 0.7] * 50  # 600 scores
    values[301] = 2.0
    push(project, "a", *[score(v, seconds=i) for i, v in enumerate(values)])
    push(project, "b", score(1.0))
    c = compare.compare(project, ["a", "b"], points=60)  # 30 points per run
    a = c.runs[0]
    assert a.first_score == 0.3
    assert len(a.scores) <= 30 and (301.0, 2.0) in a.scores
    assert a.scores[0] == (0.0, 0.3) and a.scores[-1] == (599.0, 0.7)
    assert a.frontier[0] == (0.0, 0.3) and (301.0, 2.0) in a.frontier
    assert [y for _, y in a.frontier] == sorted(y for _, y in a.frontier)


def test_query_count_does_not_grow_with_runs(client_alice, project, django_assert_max_num_queries):
    for i in range(50):
        push(
            project,
            f"r{i:02d}",
            score(0.1 * (i % 10), minutes=0),
            score(0.5, minutes=5),
            turn(0, 0.01, minutes=1),
            turn(1, 0.02, actor="w", minutes=2),
        )
    with django_assert_max_num_queries(12) as two:
        assert client_alice.get(query("r00", "r01")).status_code == 200
    with django_assert_max_num_queries(len(two.captured_queries)):
        response = client_alice.get(query(*[f"r{i:02d}" for i in range(50)]))
    assert len(response.context["comparison"].runs) == 50
    assert response.context["points"]["score_figure"] == 50 * (2 + 3)  # 2 dots + frontier (2 + end) each


def test_after_one_change_the_queries_do_not_grow_with_runs_and_read_its_new_rows_alone(
    client_alice, project, monkeypatch
):
    """The first view after a new turn and a new score in one compared run (the baseline): the same
    queries for 10 runs as for 100; of rows, its turns past those kept (no window over every turn) and
    its scores."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    ids = [f"r{i:03d}" for i in range(100)]
    for i, rid in enumerate(ids):
        push(
            project, rid, score(0.1 * (i % 10), minutes=0), turn(0, 0.01, minutes=1), turn(1, 0.02, minutes=2)
        )

    def after_change(n: int, k: int) -> list[dict]:
        client_alice.get(query(*ids[:n]))
        push(project, "r000", turn(10 + k, 0.01, minutes=10 + k), score(0.5, minutes=10 + k))
        with CaptureQueriesContext(connection) as seen:
            assert client_alice.get(query(*ids[:n])).status_code == 200
        return seen.captured_queries

    ten, hundred = after_change(10, 0), after_change(100, 1)
    assert len(hundred) == len(ten)
    read = _rows_read(hundred)
    assert len(read) == 2, read  # r000's turns past those kept, its scores
    turns = [sql for sql in read if "tracking_agentturn" in sql]
    assert len(turns) == 1 and "OVER" not in turns[0] and "GROUP BY" not in turns[0], turns


def test_outsiders_get_404_and_members_of_any_role_may_compare(client, carol, victor, two_runs):
    client.force_login(carol)
    assert client.get(query("a", "b")).status_code == 404
    client.force_login(victor)
    assert client.get(query("a", "b")).status_code == 200


def test_login_required(client, project):
    response = client.get(query("a", "b"))
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_more_than_the_limit_of_runs_are_refused_with_a_message(
    client_alice, project, django_assert_max_num_queries
):
    over = compare.MAX_RUNS + 1
    with django_assert_max_num_queries(8):
        response = client_alice.get(query(*[f"r{i}" for i in range(over)]))
    assert response.status_code == 400
    body = response.content.decode()
    assert (
        f'<div class="alert bad" role="alert" id="compare-error">{over} runs were picked; Compare takes at '
        f"most {compare.MAX_RUNS}." in body
    )
    assert "compare-score-data" not in body


def test_fifty_distinct_runs_are_allowed_and_duplicates_do_not_count(client_alice, project):
    ids = [f"r{i}" for i in range(50)]
    response = client_alice.get(query(*ids, *ids[:5]))
    assert response.status_code == 200
    assert len(response.context["missing"]) == 20 and response.context["missing_more"] == 30


def test_unknown_run_ids_are_listed_and_the_rest_compared(client_alice, two_runs):
    response = client_alice.get(query("a", "nope", "b", "gone"))
    assert response.status_code == 200
    assert [r.external_id for r in response.context["compared"]] == ["a", "b"]
    body = response.content.decode()
    missing = body.split('id="compare-missing"')[1].split("</div>")[0]
    assert '<code title="nope">nope</code>, <code title="gone">gone</code>' in missing
    assert "compare-score-data" in body


def test_fewer_than_two_runs_show_the_empty_state_and_the_picker(client_alice, two_runs):
    body = client_alice.get(URL).content.decode()
    assert "Pick two or more runs to compare" in body
    assert 'href="/projects/hill/"' in body
    assert "vendor/plotly.min.js" not in body  # nothing to chart: plotly is not even loaded
    picker = body.split('id="pick"')[1]
    assert 'name="runs" value="a"' in picker and 'name="runs" value="b"' in picker and "checked" not in picker

    body = client_alice.get(query("b", "missing")).content.decode()
    assert "One run is not a comparison yet" in body and "missing" in body
    picker = body.split('id="pick"')[1]
    assert picker.index('value="b" checked') < picker.index('value="a"')  # the picked run first, ticked


def test_run_ids_are_deduplicated_in_order_and_may_be_comma_separated(client_alice, two_runs):
    response = client_alice.get(URL + "?runs=b,a&runs=b&runs=%20a%20")
    assert [r.external_id for r in response.context["compared"]] == ["b", "a"]
    assert compare.parse_run_ids(["b,a", "b", " a ", ",,"]) == ["b", "a"]


def test_row_buttons_make_a_baseline_or_drop_a_run(client_alice, two_runs):
    body = client_alice.get(query("a", "b")).content.decode()
    b = row(body, "b")
    assert 'form="compare-rows" name="baseline" value="b" aria-label="Make b the baseline"' in b
    assert 'form="compare-rows" name="drop" value="b" aria-label="Remove b from the comparison"' in b
    # The form carries the compared runs once (not a query string per row: 200 rows made that 2 MB).
    form = body.split('id="compare-rows"')[1].split("</form>")[0]
    assert form.count('name="runs"') == 2 and 'value="a"' in form and 'value="b"' in form
    made = client_alice.get(URL, {"runs": ["a", "b"], "baseline": "b"})
    assert [r.external_id for r in made.context["compared"]] == ["b", "a"]
    dropped = client_alice.get(URL, {"runs": ["a", "b"], "drop": "b"})
    assert [r.external_id for r in dropped.context["compared"]] == ["a"]


def test_hostile_run_ids_are_escaped(client_alice, two_runs):
    hostile = ["<script>alert(1)</script>", '"><img src=x onerror=alert(2)>']
    response = client_alice.get(URL, {"runs": ["a", "b", *hostile]})
    assert response.status_code == 200
    body = response.content.decode()
    assert "<script>alert(1)" not in body and "<img src=x" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "&quot;&gt;&lt;img src=x onerror=alert(2)&gt;" in body
    assert unescape(body).count("onerror=alert(2)") == 2  # the listed id and its title, both as text


def test_score_per_dollar_is_empty_without_spend_or_scores(project):
    push(project, "free", score(0.1), score(0.3, minutes=1))
    push(project, "unscored", turn(0, 0.5))
    free, unscored = compare.compare(project, ["free", "unscored"]).runs
    assert free.gain == pytest.approx(0.2) and free.gain_per_usd is None
    assert unscored.gain is None and unscored.gain_per_usd is None
    assert unscored.deltas["gain_per_usd"] is None and unscored.deltas["usd"] == 0.5


def test_series_are_thinned_in_sql_not_in_python(project):
    """50 runs × 10,000 turns must not come back whole: the database returns about `per_run` rows a run."""
    push(project, "a", *[turn(i, 0.01, seconds=i) for i in range(1000)])
    push(project, "a", *[score(i / 1000, seconds=i) for i in range(1000)])
    push(project, "b", turn(0, 0.5))
    a, b = project.runs.order_by("external_id")
    rows = sorted(compare.spend_rows([a, b], per_run=50), key=lambda r: (r[0], r[3]))
    a_rows = [r for r in rows if r[0] == a.pk]
    assert [r[3] for r in a_rows] == [
        *range(1, 1000, 21),
        1000,
    ]  # every 21st turn (1000 // 50 + 1) and the last
    assert float(a_rows[-1][2]) == pytest.approx(10.0) and float(a_rows[1][2]) == pytest.approx(0.22)
    assert [float(r[2]) for r in rows if r[0] == b.pk] == [0.5]
    rows = sorted(compare.score_rows([a, b], maximize=True, per_run=50), key=lambda r: r[4])
    assert len(rows) == 49 and rows[-1][2:5] == (0.999, 0.999, 1000)
    assert compare.score_rows([a, b], maximize=False, per_run=50).count() == 49  # the best (first) is row 1


def test_fifty_run_colours_are_distinct_and_readable_on_white():
    colours = [style.colour(i) for i in range(compare.MAX_RUNS)]
    assert len(set(colours)) == compare.MAX_RUNS
    assert min(style.contrast_on_white(c) for c in colours) >= 3
    assert style.contrast_on_white("#ffffff") == pytest.approx(1)
    assert style.contrast_on_white("#000000") == pytest.approx(21)


def test_a_best_score_repeated_many_times_brings_back_one_row_not_all(project):
    push(
        project, "pass-fail", *[score(float(i % 2), seconds=i) for i in range(600)]
    )  # 300 times the best, 1.0
    run = project.runs.get()
    rows = sorted(compare.score_rows([run], maximize=True, per_run=30), key=lambda r: r[4])
    assert len(rows) <= 32
    assert rows[1][2:5] == (1.0, 1.0, 2)  # the first 1.0 (row 2) is kept: it is where the best was reached


def test_number_formats_for_the_table():
    assert [numbers.usd_precise(v) for v in (None, 0, 0.0431, 0.00002, 12.345, 1234.5)] == [
        "—",
        "$0",
        "$0.0431",
        "<$0.0001",
        "$12.35",
        "$1,234.50",
    ]
    assert [compare_charts.rate(v) for v in (None, 0.0518, -0.25, 8000.4, 123456)] == [
        "—",
        "0.0518",
        "−0.25",
        "8,000",
        "123,456",
    ]


# --- kept renders and kept series ---------------------------------------------------------------


def _rows_read(queries) -> list[str]:
    """The SQL of the queries that read scores or turns (what a comparison's series cost)."""
    return [
        q["sql"] for q in queries if "tracking_submission" in q["sql"] or "tracking_agentturn" in q["sql"]
    ]


def test_a_comparison_seen_again_is_served_from_its_kept_render(client_alice, two_runs):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    first = client_alice.get(query("a", "b"))
    assert "comparison" in first.context  # rendered: nothing was kept yet
    assert "{#" not in first.content.decode() and "{%" not in first.content.decode()  # no template text shows
    with CaptureQueriesContext(connection) as seen:
        again = client_alice.get(query("a", "b"))
    assert _rows_read(seen.captured_queries) == []
    assert "comparison" not in again.context  # not rendered: the kept render was served
    section = re.compile(r'<div class="grid-2 even">.*</table>', re.S)
    assert section.search(again.content.decode())[0] == section.search(first.content.decode())[0]
    # A hard reload renders it afresh (the way out should a version ever miss a change).
    with CaptureQueriesContext(connection) as seen:
        fresh = client_alice.get(query("a", "b"), headers={"cache-control": "no-cache"})
    assert "comparison" in fresh.context and _rows_read(seen.captured_queries) == []  # the series were kept


def test_a_new_score_shows_at_once_and_only_its_run_is_read_again(client_alice, two_runs, project):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client_alice.get(query("a", "b"))
    push(project, "b", score(0.95, minutes=25))
    with CaptureQueriesContext(connection) as seen:
        response = client_alice.get(query("a", "b"))
    body = response.content.decode()
    assert "0.95" in row(body, "b")
    assert [
        y for t in figure(body, "compare-score-data")["data"] if t.get("name") == "b" for y in t["y"]
    ].count(0.95) >= 1
    b = project.runs.get(external_id="b")
    read = _rows_read(seen.captured_queries)
    assert len(read) == 2  # its turns past those kept (none), its scores: of run b alone
    a = project.runs.get(external_id="a")
    for sql in read:
        assert re.search(rf'IN \({b.pk}\)|\."run_id" = {b.pk}\b', sql), sql
        assert not re.search(rf'IN \([^)]*\b{a.pk}\b|"run_id" = {a.pk}\b', sql), sql


def test_a_new_baseline_reads_no_series_and_its_deltas_are_against_it(client_alice, two_runs):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client_alice.get(query("a", "b"))
    with CaptureQueriesContext(connection) as seen:
        response = client_alice.get(URL, {"runs": ["a", "b"], "baseline": "b"})
    assert _rows_read(seen.captured_queries) == []
    body = response.content.decode()
    assert 'class="badge badge-base">baseline' in row(body, "b")
    # a's best (0.5) against the new baseline b's (0.9): −0.4, worse
    assert re.search(r'class="delta bad" title="[^"]*against b">[−-]0\.4', row(body, "a")), row(body, "a")


def test_a_renamed_parent_changes_the_kept_render(client_alice, alice, project):
    for rid in ("p", "c", "d"):
        push(project, rid, score(0.1, minutes=0))
    c = project.runs.get(external_id="c")
    c.parent = project.runs.get(external_id="p")
    c.save(update_fields=["parent", "updated"])
    assert ">p</a>" in row(client_alice.get(query("c", "d")).content.decode(), "c")
    services.update_run_labels(project.runs.get(external_id="p"), by=alice, display_name="the-parent")
    assert ">the-parent</a>" in row(client_alice.get(query("c", "d")).content.decode(), "c")


def test_a_long_comparison_shows_its_first_rows_and_loads_the_others_once_scrolled_to(client_alice, project):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from smrweb.dashboard.views.compare import ROWS_FIRST

    n = ROWS_FIRST + 5
    ids = [f"r{i:02d}" for i in range(n)]
    for i, rid in enumerate(ids):
        push(project, rid, score(0.5 + i / 100, minutes=i), turn(0, 0.01 * (i + 1), minutes=i + 1))
    body = client_alice.get(query(*ids)).content.decode()
    # Each table holds the first rows, then a row that fetches the others once revealed.
    assert re.findall(r'<tr data-run="(r\d\d)"', body) == ids[:ROWS_FIRST]
    assert [tbody.count("<tr") for tbody in _bodies(body)] == [ROWS_FIRST + 1, ROWS_FIRST + 1]
    later = re.findall(
        r'<tr class="rows-later" data-later="([a-z-]+)" hx-get="([^"]+)" hx-trigger="revealed"', body
    )
    assert [table for table, _ in later] == ["side-rows", "turn-rows"]
    assert "5 more runs load as you scroll" in body
    assert f'name="runs" value="{ids[-1]}"' in body  # the rows' buttons still carry every run
    url = unescape(later[0][1])
    assert url == query(*ids)  # the compared runs, in the comparison's order
    # The side-by-side table's later rows: the other runs in order, their deltas against the baseline.
    rest = client_alice.get(url, headers={"HX-Request": "true", "X-Smrweb-Only": "side-rows"})
    rest_body = rest.content.decode()
    assert rest.status_code == 200 and "<html" not in rest_body
    assert re.findall(r'<tr data-run="(r\d\d)"', rest_body) == ids[ROWS_FIRST:]
    assert re.search(r'class="delta good" title="[^"]*against r00">\+0\.24', row(rest_body, "r24"))
    # The turn table's later rows were made by the same request: served from the cache, no run read.
    with CaptureQueriesContext(connection) as seen:
        rest = client_alice.get(url, headers={"HX-Request": "true", "X-Smrweb-Only": "turn-rows"})
    assert _rows_read(seen.captured_queries) == []
    assert re.findall(r'<span class="rid" title="(r\d\d)"', rest.content.decode()) == ids[ROWS_FIRST:]
    # Without JavaScript the placeholder's link shows every row in the page.
    link = re.search(r'<a href="([^"]+)">show every row now</a>', body)[1]
    whole = client_alice.get(unescape(link)).content.decode()
    assert re.findall(r'<tr data-run="(r\d\d)"', whole) == ids and 'class="rows-later"' not in whole
    assert [tbody.count("<tr") for tbody in _bodies(whole)] == [n, n]


def _bodies(body: str) -> list[str]:
    """The two tables' bodies (side by side, turn statistics)."""
    return [part.split("</tbody>")[0] for part in body.split("<tbody>")[1:]]


def test_a_short_comparison_has_no_later_rows_and_a_later_request_for_too_few_runs_is_empty(
    client_alice, two_runs
):
    body = client_alice.get(query("a", "b")).content.decode()
    assert 'class="rows-later"' not in body and re.findall(r'<tr data-run="(\w)"', body) == ["a", "b"]
    gone = client_alice.get(query("a", "nope"), headers={"HX-Request": "true", "X-Smrweb-Only": "side-rows"})
    assert gone.status_code == 200 and gone.content == b""


def test_the_tables_show_each_runs_model_profile_and_downgrades(client_alice, two_runs, project):
    """The walkthrough: 3 of 4 compared SMR runs were downgraded and Compare showed only "done". The side
    by side table names the profile (requested → actual when it got another), each downgraded role, and
    the project table's "downgraded" badge; the kept render of the same runs before the change is not
    served again."""
    before = client_alice.get(query("a", "b")).content.decode()
    assert "downgraded" not in row(before, "a")
    Run.objects.filter(project=project, external_id="a").update(
        requested_profile="codex_gpt_5_4_medium",
        actual_profile="codex_gpt_5_4_mini_medium",
        updated=timezone.now(),
    )
    Run.objects.filter(project=project, external_id="b").update(
        requested_profile="codex_gpt_5_4_medium",
        actual_profile="codex_gpt_5_4_medium",
        actor_profiles=[
            {"role": "worker", "actor": f"w{i}", "requested": "codex_gpt_5_4_medium", "actual": "mini<b>"}
            for i in range(2)
        ],
        updated=timezone.now(),
    )
    body = client_alice.get(query("a", "b")).content.decode()
    assert '<th scope="col"><span title="The model profile' in body
    a, b = row(body, "a"), row(body, "b")
    assert "data-downgraded" in a and "requested codex_gpt_5_4_medium, got codex_gpt_5_4_mini_medium" in a
    assert re.search(
        r"codex_gpt_5_4_medium</span> → <b[^>]*>codex_gpt_5_4_mini_medium</b>", a.replace("<wbr>", "")
    )
    assert "data-downgraded-actor" not in a
    b = b.replace("<wbr>", "")
    assert "data-downgraded" in b and "<b>codex_gpt_5_4_medium</b>" in b  # the run's own profile held
    assert "2 × worker: codex_gpt_5_4_medium → <b>mini&lt;b&gt;</b>" in b  # grouped, escaped
    Run.objects.filter(project=project, external_id="b").update(
        requested_profile="", actual_profile="", actor_profiles=[], updated=timezone.now()
    )
    b = row(client_alice.get(query("a", "b")).content.decode(), "b")
    assert "data-downgraded" not in b and 'title="the source names no model profile">—' in b


def test_later_rows_carry_the_model_column_too(client_alice, project):
    for i in range(compare_views.ROWS_FIRST + 2):
        push(project, f"r{i:02d}", score(0.1 * i, minutes=i), turn(1, 0.01, minutes=i))
    Run.objects.filter(project=project, external_id="r21").update(
        requested_profile="big", actual_profile="small", updated=timezone.now()
    )
    ids = [f"r{i:02d}" for i in range(compare_views.ROWS_FIRST + 2)]
    page = client_alice.get(query(*ids)).content.decode()
    assert 'data-later="side-rows"' in page and 'colspan="12"' in page and 'colspan="11"' in page
    later = client_alice.get(query(*ids), headers={"HX-Request": "true", "X-Smrweb-Only": "side-rows"})
    r21 = row(later.content.decode(), "r21")
    assert "data-downgraded" in r21 and "big</span> → <b" in r21
    assert r21.count("<td") == 11  # state, model, final … started, actions: the header's twelve with the run


def test_turns_of_role_unknown_are_counted_apart_in_the_turn_table_and_the_export(client_alice, project):
    """A turn no source gave a side (an SMR actor whose role nothing states) is neither driver nor child:
    the turn statistics show it apart, and the export carries its count."""
    from smrweb.tracking.models import AgentTurn, TurnKind

    push(project, "a", turn(0, 1.0), turn(1, 1.0), turn(0, 0.5, actor="w1"), turn(0, 0.2, actor="ghost"))
    AgentTurn.objects.filter(actor="ghost").update(kind=TurnKind.ROLE_UNKNOWN)  # as the SMR sync books it
    push(project, "b", turn(0, 1.0))
    body = client_alice.get(query("a", "b")).content.decode()
    turns_table = body.split('<table class="compare-turns">')[1].split("</table>")[0]
    a_row = turns_table.split('title="a"')[1].split("</tr>")[0]
    assert '<td class="num">2 · 1 · <span class="kind role_unknown"' in a_row and "1 role unknown" in a_row
    b_row = turns_table.split('title="b"')[1].split("</tr>")[0]
    assert '<td class="num">1 · 0</td>' in b_row  # none unknown: nothing added
    export = client_alice.get(f"/projects/{project.slug}/compare/export?runs=a&runs=b&format=csv")
    lines = b"".join(export.streaming_content).decode().splitlines()
    header = lines[0].split(",")
    assert "role_unknown_turns" in header
    by_run = {line.split(",")[0]: line.split(",") for line in lines[1:]}
    assert by_run["a"][header.index("role_unknown_turns")] == "1"
