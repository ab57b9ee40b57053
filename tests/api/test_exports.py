"""`?format=csv` and `?format=jsonl` on the API's lists (runs, submissions, turns, metrics): the JSON
answer's rows and values, every page at once, the same filters and permissions, streamed with bounded
memory, spreadsheet formulas defused, errors still JSON."""

from __future__ import annotations

import csv
import io
import json
import tracemalloc
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import MetricPoint, Run
from smrweb.tracking.services.params import log_params
from tests.api.helpers import assert_json_error, session_client

pytestmark = pytest.mark.django_db
A = "/api/v1/projects/hill"


def _events(project, run_id, events):
    services.ingest_events(project, run_id, parse_events(json.dumps(events)))


@pytest.fixture
def world(project, bob):
    """Run r1 (running, tagged, named like a formula, 120 turns, two metrics, three scores); r2 failed."""
    _events(
        project,
        "r1",
        [
            {"type": "state", "id": "s", "state": "running", "ts": "2026-01-01T00:00:00Z"},
            *[
                {
                    "type": "agent.turn",
                    "id": f"t{i}",
                    "turn": i,
                    "model": "=cmd|' /C calc'!A0" if i == 3 else "model-a",
                    "tokens_in": 10 + i,
                    "tokens_out": 5,
                    "cost_usd": 0.0125,
                    "tool_calls": [{"name": "bash"}] if i % 2 else [],
                    "ts": f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z",
                }
                for i in range(120)
            ],
            *[
                {"type": "metric", "id": f"l{i}", "key": "loss", "value": 1.0 / (i + 1), "step": i}
                for i in range(30)
            ],
            *[
                {"type": "metric", "id": f"a{i}", "key": "acc", "value": -0.5 + i, "step": i}
                for i in range(5)
            ],
            *[{"type": "score", "id": f"sc{i}", "score": 0.25 * (i + 1)} for i in range(3)],
        ],
    )
    _events(
        project,
        "r2",
        [
            {
                "type": "state",
                "id": "s",
                "state": "failed",
                "failure": {"family": "oom", "detail": "+oom killed"},
            }
        ],
    )
    run = Run.objects.get(project=project, external_id="r1")
    services.update_run_labels(run, by=bob, display_name='=HYPERLINK("http://evil.example")')
    services.set_tag(run, key="sweep", value="@lr-3", by=bob)
    return run


def _csv(response) -> list[dict]:
    assert response.status_code == 200, response.content[:300] if not response.streaming else ""
    assert response.streaming and response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"].startswith('attachment; filename="hill-')
    text = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(text)))


def _jsonl(response) -> list[dict]:
    assert response.status_code == 200
    assert response.streaming and response["Content-Type"] == "application/x-ndjson; charset=utf-8"
    return [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]


def _same(cell: str, value) -> bool:
    """A CSV cell says the JSON value: empty for null, true/false, the number, JSON for lists and objects,
    the text (an apostrophe first when a spreadsheet would run it)."""
    if value is None:
        return cell == ""
    if isinstance(value, bool):
        return cell == ("true" if value else "false")
    if isinstance(value, int | float):
        return float(cell) == value
    if isinstance(value, dict | list):
        return json.loads(cell) == value
    if value[:1] in ("=", "+", "@") or (value[:1] == "-" and not _number(value)):
        return cell == "'" + value
    return cell == value


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _round_trip(api, path: str, json_rows: list[dict]) -> None:
    sep = "&" if "?" in path else "?"
    rows = _csv(api.get(f"{path}{sep}format=csv"))
    assert len(rows) == len(json_rows)
    for row, expected in zip(rows, json_rows, strict=True):
        assert list(row) == list(expected)  # the header is the JSON field names, in order
        for name, value in expected.items():
            assert _same(row[name], value), (name, row[name], value)
    assert _jsonl(api.get(f"{path}{sep}format=jsonl")) == json_rows


NESTED_RUN_FIELDS = {"tags", "params", "spend", "failure", "over_budget_on", "downgraded_actors"}


def _runs_round_trip(api, path: str, json_rows: list[dict]) -> list[dict]:
    """The runs CSV: every flat field of the JSON answer as it is, the nested ones spread over columns;
    the JSONL stays the JSON answer, nested."""
    sep = "&" if "?" in path else "?"
    rows = _csv(api.get(f"{path}{sep}format=csv"))
    assert [r["external_id"] for r in rows] == [r["external_id"] for r in json_rows]
    for row, expected in zip(rows, json_rows, strict=True):
        for name, value in expected.items():
            if name not in NESTED_RUN_FIELDS:
                assert _same(row[name], value), (name, row[name], value)
        spend = expected["spend"]
        assert row["turn_usd"] == spend["usd"] and row["driver_usd"] == spend["driver_inference"]["usd"]
        assert row["spend_usd"] == (spend["billed_usd"] or spend["usd"])
        assert int(row["tokens_in"]) == spend["tokens_in"] and int(row["tokens_out"]) == spend["tokens_out"]
        for tag in expected["tags"]:
            assert row[f"tag.{tag['key']}"] in (tag["value"], "'" + tag["value"], "true")
        for param in expected["params"]:
            assert row[f"param.{param['key']}"] == param["value"]
        assert not any(cell.startswith(("[", "{")) for cell in row.values())  # nothing nested
    assert _jsonl(api.get(f"{path}{sep}format=jsonl")) == json_rows
    return rows


def test_runs_export_is_the_json_list_whole(api, world):
    json_rows = api.get(f"{A}/runs").json()["results"]
    assert [r["external_id"] for r in json_rows] == ["r2", "r1"] or len(json_rows) == 2
    _runs_round_trip(api, f"{A}/runs", json_rows)


def test_runs_export_honours_the_filters(api, world):
    for query in ("state=failed", "tag=sweep=@lr-3", "q=hyperlink", "sort=-turns"):
        json_rows = api.get(f"{A}/runs?{query}").json()["results"]
        assert json_rows
        _runs_round_trip(api, f"{A}/runs?{query}", json_rows)
    assert [r["external_id"] for r in _csv(api.get(f"{A}/runs?state=failed&format=csv"))] == ["r2"]


def test_the_runs_csv_is_flat_so_a_spreadsheet_can_sum_it(api, world, project, alice, bob):
    """The walkthrough: `spend` was one JSON blob per cell and tags/params JSON arrays; nothing to sum.
    Flat columns: spend_usd (billed where the source bills), tokens, one column per tag and param key
    (the union over the exported runs: empty where a run has none); formulas still defused."""
    r2 = Run.objects.get(project=project, external_id="r2")
    Run.objects.filter(pk=r2.pk).update(source_total_usd="2.500000", cost_usd="2.000000")
    services.set_tag(r2, key="arm", value="b", by=bob)
    services.set_tag(r2, key="promising", value="", by=bob)
    log_params(r2, [("lr", "0.01"), ("note", "=SUM(A1)")], by=alice)
    text = b"".join(api.get(f"{A}/runs?format=csv").streaming_content).decode()
    header = next(csv.reader(io.StringIO(text)))
    assert header[header.index("spend_usd") : header.index("spend_usd") + 5] == [
        "spend_usd",
        "billed_usd",
        "turn_usd",
        "tokens_in",
        "tokens_out",
    ]
    assert header[-5:] == ["tag.arm", "tag.promising", "tag.sweep", "param.lr", "param.note"]
    assert not {"spend", "tags", "params", "failure"} & set(header)
    rows = {r["external_id"]: r for r in csv.DictReader(io.StringIO(text))}
    r1, r2 = rows["r1"], rows["r2"]
    assert (r2["spend_usd"], r2["billed_usd"], r2["turn_usd"]) == ("2.500000", "2.500000", "2.000000")
    assert r1["spend_usd"] == r1["turn_usd"] == "1.500000" and r1["billed_usd"] == ""  # 120 × 0.0125
    assert sum(Decimal(r["spend_usd"]) for r in rows.values()) == Decimal("4")  # what a spreadsheet sums
    assert int(r1["tokens_in"]) == sum(10 + i for i in range(120)) and r1["tokens_out"] == "600"
    assert (r2["tag.arm"], r2["tag.promising"], r2["tag.sweep"]) == ("b", "true", "")
    assert (r1["tag.arm"], r1["tag.sweep"]) == ("", "'@lr-3")  # a formula, defused
    assert (r2["param.lr"], r2["param.note"], r1["param.lr"]) == ("0.01", "'=SUM(A1)", "")
    assert (r2["failure_family"], r2["failure_detail"]) == ("oom", "'+oom killed")
    # JSON Lines stay nested: the JSON answer.
    nested = {r["external_id"]: r for r in _jsonl(api.get(f"{A}/runs?format=jsonl"))}
    assert nested["r2"]["spend"]["billed_usd"] == "2.500000"
    assert {t["key"] for t in nested["r2"]["tags"]} == {"arm", "promising"}
    assert nested["r2"]["params"] == [{"key": "lr", "value": "0.01"}, {"key": "note", "value": "=SUM(A1)"}]


def test_submissions_export_round_trips(api, world):
    json_rows = api.get(f"{A}/submissions").json()["results"]
    assert len(json_rows) == 3
    _round_trip(api, f"{A}/submissions", json_rows)
    _round_trip(api, f"{A}/submissions?run=r1", api.get(f"{A}/submissions?run=r1").json()["results"])
    assert _csv(api.get(f"{A}/submissions?run=r2&format=csv")) == []


def test_turns_export_is_every_turn_without_pagination(api, world):
    first = api.get(f"{A}/runs/r1/turns").json()
    assert first["count"] == 120 and len(first["results"]) == 100  # the JSON list is paged
    json_rows = first["results"] + api.get(first["next"]).json()["results"]
    _round_trip(api, f"{A}/runs/r1/turns", json_rows)
    rows = _csv(api.get(f"{A}/runs/r1/turns?format=csv"))
    assert rows[3]["model"] == "'=cmd|' /C calc'!A0"  # a formula is text, with an apostrophe first
    assert rows[0]["cost_usd"] == "0.012500" and rows[0]["tool_calls"] == "[]"


def test_metrics_export_is_every_raw_point(api, world):
    series = api.get(f"{A}/runs/r1/metrics?key=loss&points=10000").json()
    assert series["downsampled"] is False
    rows = _csv(api.get(f"{A}/runs/r1/metrics?key=loss&format=csv"))
    assert [(int(r["step"]), float(r["value"])) for r in rows] == [
        (p["step"], p["value"]) for p in series["points"]
    ]
    assert {r["key"] for r in rows} == {"loss"}
    every = _jsonl(api.get(f"{A}/runs/r1/metrics?format=jsonl"))
    assert [(p["key"], p["step"]) for p in every] == [("acc", i) for i in range(5)] + [
        ("loss", i) for i in range(30)
    ]
    assert every[0] == {"key": "acc", "step": 0, "value": -0.5, "ts": every[0]["ts"]}
    assert datetime.fromisoformat(every[0]["ts"]).tzinfo is not None
    acc = _csv(api.get(f"{A}/runs/r1/metrics?key=acc&format=csv"))
    assert acc[0]["value"] == "-0.5"  # a negative number is not mistaken for a formula


def test_exports_keep_the_permissions_and_errors_stay_json(
    api, anon_api, world, carol, victor, other_project
):
    for path in ("runs", "submissions", "runs/r1/turns", "runs/r1/metrics"):
        assert_json_error(anon_api.get(f"{A}/{path}?format=csv"), 401)
        assert_json_error(session_client(carol).get(f"{A}/{path}?format=csv"), 404)
        other_token = services.create_api_token(other_project, name=f"o-{path}")[1]
        anon_api.credentials(HTTP_AUTHORIZATION=f"Bearer {other_token}")
        assert_json_error(anon_api.get(f"{A}/{path}?format=jsonl"), 403)
        anon_api.credentials()
        assert session_client(victor).get(f"{A}/{path}?format=csv").status_code == 200  # viewers read
    assert_json_error(api.get(f"{A}/runs/nope/turns?format=csv"), 404)
    body = assert_json_error(api.get(f"{A}/runs?state=bogus&format=csv"), 400)
    assert body["errors"][0]["field"] == "state"
    body = assert_json_error(api.get(f"{A}/runs?format=xml"), 400)
    assert body["errors"][0]["field"] == "format"
    assert api.get(f"{A}/runs?format=json").json()["count"] == 2  # json is the JSON answer


def _stream(response) -> tuple[int, int, int]:
    """(lines, bytes, peak traced Python memory) of consuming a streamed export chunk by chunk."""
    assert response.streaming
    tracemalloc.start()
    try:
        lines = size = 0
        for chunk in response.streaming_content:
            lines += chunk.count(b"\n")
            size += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return lines, size, peak


def test_a_50000_point_export_streams_in_bounded_memory(api, project, world, record_property):
    run = Run.objects.get(project=project, external_id="r2")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for key, total in (("big", 50_000), ("small", 10_000)):
        MetricPoint.objects.bulk_create(
            (
                MetricPoint(
                    run=run,
                    key=key,
                    step=i,
                    value=1.0 / (i + 1),
                    ts=start + timedelta(seconds=i),
                    event_id=f"{key}{i}",
                )
                for i in range(total)
            ),
            batch_size=5000,
        )
    lines, size, peak = _stream(api.get(f"{A}/runs/r2/metrics?key=big&format=csv"))
    assert lines == 50_001  # the header and every point
    small_lines, small_size, small_peak = _stream(api.get(f"{A}/runs/r2/metrics?key=small&format=csv"))
    assert small_lines == 10_001
    jsonl_lines, jsonl_size, jsonl_peak = _stream(api.get(f"{A}/runs/r2/metrics?key=small&format=jsonl"))
    assert jsonl_lines == 10_000
    # What the same rows cost held in memory at once (only the values, not even the text).
    tracemalloc.start()
    held = list(MetricPoint.objects.filter(run=run, key="big").values_list("key", "step", "value", "ts"))
    _, materialised = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(held) == 50_000
    del held
    for name, value in [
        ("csv_bytes", size),
        ("csv_peak", peak),
        ("csv_peak_10k", small_peak),
        ("jsonl_bytes_10k", jsonl_size),
        ("jsonl_peak_10k", jsonl_peak),
        ("materialised", materialised),
    ]:
        record_property(name, value)
    print(
        f"\n50,000-point export: CSV {size:,} bytes, peak {peak:,} (10,000 points: {small_peak:,}); "
        f"JSONL of 10,000: {jsonl_size:,} bytes, peak {jsonl_peak:,}; the 50,000 rows held at once: "
        f"{materialised:,}"
    )
    # Flat: ten times the rows costs about the same; far below the export's size and the rows held whole.
    assert peak < small_peak * 1.5 + 500_000 and jsonl_peak < 4_000_000 and peak < 4_000_000
    # What the 40,000 more rows add to the peak is a small share of their bytes and of the rows held whole
    # (the peak itself is mostly fixed: the database driver's fetch buffer is ~2 MB on PostgreSQL).
    grown = peak - small_peak
    assert grown < (size - small_size) / 5 and grown < materialised * 0.8 / 20, (grown, size - small_size)
