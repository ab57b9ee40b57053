"""Red-team finding 7: large finite values an agent may push (±1.7e308) overflowed the SQL average, so the
metric API answered 500 and the run page shipped `Infinity` in its chart JSON (no chart drew); a reviewer's
extreme arena score answered 500. Now the means are exact, the charts' JSON is strict, and the arena score
is refused with a field error."""

from __future__ import annotations

import json
import math
import re

import pytest

from smrweb.tracking import services
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import Submission, VerificationOutcome
from smrweb.tracking.services import handoff
from smrweb.tracking.services import submissions as lifecycle
from tests.api.helpers import session_client

HUGE = 1.7e308


def push(project, run: str, events: list[dict]) -> None:
    services.ingest_events(project, run, parse_events(json.dumps(events)))


def strict(text: str):
    """JSON.parse's view: no NaN, Infinity or -Infinity."""
    return json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in chart JSON"))


@pytest.mark.parametrize("points", [2, 1000])
def test_the_metric_api_averages_huge_values_exactly(api, project, points):
    push(
        project,
        "huge",
        [
            {"type": "metric", "id": f"m{i}", "key": "m", "value": HUGE if i % 2 else -HUGE / 2, "step": i}
            for i in range(2000)
        ],
    )
    response = api.get(f"/api/v1/projects/hill/runs/huge/metrics?key=m&points={points}")
    assert response.status_code == 200, response.content[:300]
    body = strict(response.content)
    assert body["total_points"] == 2000 and body["downsampled"]
    values = [p["value"] for p in body["points"]]
    assert values and all(math.isfinite(v) for v in values)
    assert values[0] == pytest.approx((HUGE - HUGE / 2) / 2, rel=1e-9)  # each bucket: one of each


def test_the_run_page_charts_are_strict_json_and_bounded(client_alice, project):
    push(
        project,
        "huge2",
        [{"type": "metric", "id": f"m{i}", "key": "m", "value": HUGE, "step": i} for i in range(3000)]
        + [{"type": "score", "id": "s", "score": 1e308}],
    )
    body = client_alice.get("/projects/hill/runs/huge2/").content.decode()
    figures = re.findall(r'<script id="[^"]+" type="application/json">(.*?)</script>', body, re.S)
    assert figures
    for raw in figures:
        data = strict(raw)  # parses like the browser's JSON.parse

        def numbers(value):
            if isinstance(value, float):
                yield value
            elif isinstance(value, dict):
                for item in value.values():
                    yield from numbers(item)
            elif isinstance(value, list):
                for item in value:
                    yield from numbers(item)

        assert all(abs(v) <= 1e300 for v in numbers(data))


def test_an_extreme_arena_score_is_a_field_error_not_a_500(project, alice, bob):
    push(project, "r1", [{"type": "score", "id": "s", "score": 0.5}])
    sub = Submission.objects.get()
    lifecycle.request_verification(sub, by=bob)
    lifecycle.record_verification(
        sub.pk, lifecycle.VerificationResult(VerificationOutcome.PASSED, 0, "", "ok")
    )
    lifecycle.review(Submission.objects.get(pk=sub.pk), by=alice, verdict="approve", comment="ok")
    handoff.mark_uploaded(Submission.objects.get(pk=sub.pk), by=bob)
    for score in (-HUGE, HUGE):
        response = session_client(bob).post(
            f"/api/v1/projects/hill/submissions/{sub.pk}/arena-result",
            {"rank": 1, "arena_score": score},
            format="json",
        )
        assert response.status_code == 400, response.content
        assert response.json()["errors"][0]["field"] == "arena_score"
    with pytest.raises(InvalidInput):
        handoff.record_arena_result(Submission.objects.get(pk=sub.pk), by=bob, rank=1, arena_score=-HUGE)
    assert Submission.objects.get(pk=sub.pk).status == "uploaded"  # nothing was written


@pytest.mark.parametrize(
    ("value", "drawn"),
    [
        (0.5, 0.5),
        (1e299, 1e299),
        (1e300, 1e300),
        (-1.5e305, -1e300),
        (HUGE, 1e300),
        (float("nan"), None),
        (float("-inf"), None),
    ],
)
def test_a_figure_is_written_as_a_browser_can_draw_it(value, drawn):
    """figure_json encodes a figure as it is when it can be drawn so, and otherwise (NaN, ±inf, magnitudes
    plotly's axis arithmetic overflows on) the drawable copy of it."""
    from smrweb.dashboard.templatetags.smrweb import figure_json

    html = figure_json({"data": [{"y": [1.0, value, 2], "name": "a <b>"}], "layout": {"n": 3}}, "f")
    raw = re.fullmatch(r'<script id="f" type="application/json">(.*)</script>', html)[1]
    assert "<" not in raw
    assert strict(raw) == {"data": [{"y": [1.0, drawn, 2], "name": "a <b>"}], "layout": {"n": 3}}
