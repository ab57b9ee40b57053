"""The pages' export buttons: the runs table (as filtered), the leaderboard and every submission, a run's
turns and metric points, the compare table — links that carry the page's filters, answered as CSV or JSON
Lines with the JSON API's values, for whoever may read the page, with formulas defused."""

from __future__ import annotations

import csv
import html
import io
import json
import re

import pytest

from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import Run, Submission, VerificationOutcome
from smrweb.tracking.queries import compare
from smrweb.tracking.services import submissions as lifecycle
from smrweb.tracking.services.params import log_params

pytestmark = pytest.mark.django_db
P = "/projects/hill"


def _events(project, run_id, events):
    services.ingest_events(project, run_id, parse_events(json.dumps(events)))


@pytest.fixture
def world(project, bob):
    """r1 running (three scores, the best verified, two turns, a metric) named like a formula; r2 failed."""
    _events(
        project,
        "r1",
        [
            {"type": "state", "id": "s", "state": "running", "ts": "2026-01-01T00:00:00Z"},
            {
                "type": "agent.turn",
                "id": "t0",
                "turn": 0,
                "model": "m",
                "cost_usd": 0.5,
                "ts": "2026-01-01T00:00:05Z",
            },
            {
                "type": "agent.turn",
                "id": "t1",
                "turn": 1,
                "model": "m",
                "cost_usd": 0.25,
                "ts": "2026-01-01T00:00:09Z",
            },
            *[
                {"type": "metric", "id": f"l{i}", "key": "loss", "value": 2.0 - i, "step": i}
                for i in range(4)
            ],
            *[
                {"type": "score", "id": f"sc{i}", "score": 0.5 + i, "ts": f"2026-01-01T00:01:0{i}Z"}
                for i in range(3)
            ],
        ],
    )
    _events(
        project,
        "r2",
        [
            {"type": "state", "id": "s", "state": "running", "ts": "2026-01-01T00:00:00Z"},
            {"type": "score", "id": "sc", "score": 0.75, "ts": "2026-01-01T00:02:00Z"},
            {"type": "state", "id": "f", "state": "failed", "ts": "2026-01-01T00:03:00Z"},
        ],
    )
    for sub in Submission.objects.filter(project=project):
        lifecycle.request_verification(sub, by=bob)
        lifecycle.record_verification(
            sub.pk, lifecycle.VerificationResult(VerificationOutcome.PASSED, 0, "ok", "ok")
        )
    run = Run.objects.get(project=project, external_id="r1")
    services.update_run_labels(run, by=bob, display_name="=1+2")
    return run


def _csv(response) -> list[dict]:
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    return list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))


def _jsonl(response) -> list[dict]:
    assert response.status_code == 200 and response.streaming
    return [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]


def _export_links(body: str, what: str) -> list[str]:
    """The hrefs of the export buttons labelled `what` on a page."""
    block = body.split(f'data-export="{what}"', 1)[1].split("</span>", 1)[0]
    return [html.unescape(h) for h in re.findall(r'href="([^"]+)"', block)]


def test_the_runs_buttons_carry_the_filters_and_export_what_the_table_shows(client, victor, world):
    client.force_login(victor)  # a viewer: anyone who may read the page may export it
    body = client.get(f"{P}/", {"state": "failed", "q": "r", "sort": "bogus"}).content.decode()
    csv_link, jsonl_link = _export_links(body, "runs")
    assert csv_link.startswith("/api/v1/projects/hill/runs?") and csv_link.endswith("format=csv")
    assert "state=failed" in csv_link and "q=r" in csv_link and "bogus" not in csv_link  # what the page used
    rows = _csv(client.get(csv_link))
    assert [r["external_id"] for r in rows] == ["r2"]
    api_rows = client.get("/api/v1/projects/hill/runs", {"state": "failed", "q": "r"}).json()["results"]
    assert _jsonl(client.get(jsonl_link)) == api_rows
    every = _csv(client.get(_export_links(client.get(f"{P}/").content.decode(), "runs")[0]))
    assert {r["external_id"] for r in every} == {"r1", "r2"}
    assert next(r for r in every if r["external_id"] == "r1")["display_name"] == "'=1+2"  # a formula defused


def test_the_runs_buttons_carry_the_param_filter_and_the_csv_is_flat(client, alice, victor, world):
    log_params(world, [("lr", "0.01")], by=alice)
    client.force_login(victor)
    csv_link, _ = _export_links(client.get(f"{P}/", {"param": "lr=0.01"}).content.decode(), "runs")
    assert "param=lr%3D0.01" in csv_link
    rows = _csv(client.get(csv_link))
    assert [(r["external_id"], r["param.lr"]) for r in rows] == [("r1", "0.01")]
    assert "spend" not in rows[0] and rows[0]["spend_usd"] == rows[0]["turn_usd"]


def test_the_leaderboard_export_is_the_board_as_shown(client, victor, world, project):
    client.force_login(victor)
    body = client.get(f"{P}/").content.decode()
    csv_link, jsonl_link = _export_links(body, "the leaderboard")
    assert csv_link == f"{P}/leaderboard/export?format=csv"
    rows = _csv(client.get(csv_link))
    # Best per run, best first: r1's 2.5, then r2's 0.75.
    assert [(r["rank"], r["run"], float(r["score"])) for r in rows] == [("1", "r1", 2.5), ("2", "r2", 0.75)]
    api = {s["id"]: s for s in client.get("/api/v1/projects/hill/submissions").json()["results"]}
    for row in _jsonl(client.get(jsonl_link)):
        same = api[row["id"]]
        for name in (
            "run",
            "score",
            "status",
            "harness_id",
            "artifact_ref",
            "artifact_sha256",
            "commit",
            "ts",
        ):
            assert row[name] == same[name], name
    board_all = client.get(f"{P}/", {"board": "all"}).content.decode()
    all_link = _export_links(board_all, "the leaderboard")[0]
    assert "board=all" in all_link
    assert [float(r["score"]) for r in _csv(client.get(all_link))] == [2.5, 1.5, 0.75, 0.5]
    submissions = re.search(r'href="([^"]+)" download data-export="submissions"', body).group(1)
    assert len(_csv(client.get(html.unescape(submissions)))) == 4


def test_the_run_page_exports_turns_and_metric_points(client, victor, world):
    client.force_login(victor)
    body = client.get(f"{P}/runs/r1/").content.decode()
    turns_csv, _ = _export_links(body, "every turn")
    metrics_csv, metrics_jsonl = _export_links(body, "every metric point")
    turns = _csv(client.get(turns_csv))
    assert [(r["turn"], r["cost_usd"]) for r in turns] == [("0", "0.500000"), ("1", "0.250000")]
    assert [(p["key"], p["step"], p["value"]) for p in _jsonl(client.get(metrics_jsonl))] == [
        ("loss", i, 2.0 - i) for i in range(4)
    ]
    assert len(_csv(client.get(metrics_csv))) == 4


def test_the_compare_export_is_the_side_by_side_table(client, victor, world):
    client.force_login(victor)
    body = client.get(f"{P}/compare/", {"runs": ["r2", "r1"]}).content.decode()
    csv_link, jsonl_link = _export_links(body, "this table")
    assert csv_link == f"{P}/compare/export?runs=r2&runs=r1&format=csv"
    rows = _csv(client.get(csv_link))
    assert [r["external_id"] for r in rows] == ["r2", "r1"]  # the baseline first
    r2, r1 = _jsonl(client.get(jsonl_link))
    assert r1["display_name"] == "=1+2" and rows[1]["display_name"] == "'=1+2"
    assert (r1["best_score"], r1["turn_count"], r1["usd"], r1["driver_turns"]) == (2.5, 2, "0.750000", 2)
    assert r2["delta_best"] == 0 and r1["delta_best"] == pytest.approx(2.5 - 0.75)
    assert r1["delta_turns"] == 2 and r1["delta_usd"] == pytest.approx(0.75)


def test_exports_refuse_outsiders_and_bad_requests(client, carol, victor, world):
    urls = [f"{P}/leaderboard/export?format=csv", f"{P}/compare/export?runs=r1&format=csv"]
    for url in urls:
        assert client.get(url).status_code == 302  # signed out: to the login page
    client.force_login(carol)
    for url in urls:
        assert client.get(url).status_code == 404
    client.force_login(victor)
    assert client.get(f"{P}/leaderboard/export?format=xlsx").status_code == 400
    too_many = "&".join(f"runs=r{i}" for i in range(compare.MAX_RUNS + 10))
    assert client.get(f"{P}/compare/export?{too_many}&format=csv").status_code == 400
    assert client.post(f"{P}/leaderboard/export?format=csv").status_code == 405
