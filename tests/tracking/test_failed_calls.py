"""Failed calls as data (issue 37 item 3): agent.turn keeps a failed call's status, error, HTTP status and
message from every way in; the run counts them; the run page lists them; the runs table filters on them;
an error-streak alert fires once per streak."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from smrweb.tracking import events as ev
from smrweb.tracking import queries, services
from smrweb.tracking.models import AgentTurn, Channel, Notification, NotificationStatus, Run, Trigger
from smrweb.tracking.services.alerts import evaluation
from tests.factories import push

T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)


def call(n: int, *, ok: bool = True, actor: str = "driver", **extra) -> dict:
    event = {
        "type": "agent.turn",
        "turn": n,
        "actor": actor,
        "ts": (T0 + timedelta(seconds=n)).isoformat(),
        "model": "gpt-4o",
        "tokens_in": 100 if ok else 0,
        "tokens_out": 10 if ok else 0,
    }
    if not ok:
        event.update(error="RateLimitError", http_status=429, error_message="Rate limit reached for gpt-4o")
    return {**event, **extra}


@pytest.mark.django_db
def test_rest_turns_keep_their_failure_and_the_run_counts_them(project):
    push(
        project,
        "f1",
        call(0),
        call(1, ok=False),
        call(2, status="error", error="AuthenticationError", http_status=401),
        call(3, http_status=200),  # a status under 400 alone is no failure
        call(4, status="ok", error="", http_status=503),  # status says, whatever else is sent
        call(5, error_message="x" * 5000),  # a message alone is a failure; stored cut, never refused
    )
    run = Run.objects.get(external_id="f1")
    got = {t.turn: (t.failed, t.error, t.http_status) for t in AgentTurn.objects.filter(run=run)}
    assert got == {
        0: (False, "", None),
        1: (True, "RateLimitError", 429),
        2: (True, "AuthenticationError", 401),
        3: (False, "", 200),
        4: (False, "", 503),
        5: (True, "", None),
    }
    assert len(AgentTurn.objects.get(run=run, turn=5).error_message) == ev.ERROR_MESSAGE_MAX
    assert (run.failed_turns, run.turn_count) == (3, 6)


@pytest.mark.django_db
def test_rest_refuses_a_bad_http_status_with_field_detail(api, project):
    answer = api.post(
        f"/api/v1/projects/{project.slug}/runs/f2/events",
        data=json.dumps([call(0, ok=False, http_status=700), call(1, status="broken")]),
        content_type="application/json",
    )
    assert answer.status_code == 400
    assert {(e["index"], e["field"]) for e in answer.json()["errors"]} == {(0, "http_status"), (1, "status")}
    assert not Run.objects.filter(external_id="f2").exists()


@pytest.mark.django_db
def test_an_otlp_span_with_status_error_is_a_failed_call(project, token):
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"smrweb.run_id": "otel-f"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    start = 1_772_366_400 * 10**9
    ok = tracer.start_span(
        "chat ok",
        start_time=start,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.usage.input_tokens": 10,
            "gen_ai.usage.output_tokens": 1,
            "smrweb.turn": 1,
        },
    )
    ok.end(end_time=start + 10**9)
    bad = tracer.start_span(
        "chat bad",
        start_time=start + 2 * 10**9,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o",
            "smrweb.turn": 2,
            "error.type": "openai.RateLimitError",
            "http.response.status_code": 429,
        },
    )
    bad.record_exception(RuntimeError("Rate limit reached"))
    bad.set_status(Status(StatusCode.ERROR, "Error code: 429 - rate limit"))
    bad.end(end_time=start + 3 * 10**9)
    raised = tracer.start_span(
        "chat raised",
        start_time=start + 4 * 10**9,
        attributes={"gen_ai.operation.name": "chat", "smrweb.turn": 3},
    )
    raised.record_exception(ConnectionError("connection reset"))
    raised.set_status(Status(StatusCode.ERROR))
    raised.end(end_time=start + 5 * 10**9)
    body = encode_spans(exporter.get_finished_spans()).SerializeToString()
    answer = Client().post(
        "/v1/traces", data=body, content_type="application/x-protobuf", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert answer.status_code == 200, answer.content
    got = {
        t.turn: (t.failed, t.error, t.http_status, t.error_message)
        for t in AgentTurn.objects.filter(run__external_id="otel-f")
    }
    assert got == {
        1: (False, "", None, ""),
        2: (True, "openai.RateLimitError", 429, "Error code: 429 - rate limit"),
        3: (True, "ConnectionError", None, "connection reset"),  # from the recorded exception
    }


@pytest.mark.django_db
def test_the_run_page_lists_failed_calls_and_the_runs_table_filters_on_them(project, client_alice):
    push(project, "ok-run", call(0), call(1))
    push(project, "bad-run", call(0), call(1, ok=False), call(2, ok=False, model="claude-sonnet-4"), call(3))
    run = Run.objects.get(external_id="bad-run")
    failures = queries.failed_calls(run)
    assert (failures.count, failures.rate) == (2, 0.5)
    assert [(m["model"], m["n"]) for m in failures.by_model] == [("claude-sonnet-4", 1), ("gpt-4o", 1)]
    assert [(e["error"], e["http_status"], e["n"]) for e in failures.by_error] == [("RateLimitError", 429, 2)]
    assert [t.turn for t in failures.recent] == [2, 1]
    page = client_alice.get(f"/projects/{project.slug}/runs/bad-run/").content.decode()
    card = page.split('id="failed-calls"')[1].split("</section>")[0]
    assert 'data-failed="2"' in card and "(50%)" in card and "Rate limit reached for gpt-4o" in card
    assert "HTTP 429" in card and 'data-failed-model="claude-sonnet-4"' in card
    quiet = client_alice.get(f"/projects/{project.slug}/runs/ok-run/").content.decode()
    assert 'id="failed-calls" hidden' in quiet
    table = client_alice.get(f"/projects/{project.slug}/?failed_calls=1").content.decode()
    assert "bad-run" in table and "ok-run" not in table and 'data-failed-calls="2"' in table
    assert "ok-run" in client_alice.get(f"/projects/{project.slug}/?failed_calls=0").content.decode()
    turns = client_alice.get(f"/api/v1/projects/{project.slug}/runs/bad-run/turns").json()["results"]
    failed = [(t["turn"], t["error"], t["http_status"]) for t in turns if t["failed"]]
    assert sorted(failed) == [(1, "RateLimitError", 429), (2, "RateLimitError", 429)]
    assert client_alice.get(f"/api/v1/projects/{project.slug}/runs/bad-run").json()["failed_turns"] == 2
    api = client_alice.get(f"/api/v1/projects/{project.slug}/runs?failed_calls=true").json()
    assert [r["id"] if "id" in r else r["external_id"] for r in api["results"]] == ["bad-run"]


@pytest.mark.django_db
def test_reading_failed_calls_does_not_scan_the_runs_other_turns(project):
    push(project, "long", *[call(i) for i in range(3000)], call(3000, ok=False))
    run = Run.objects.get(external_id="long")
    with CaptureQueriesContext(connection) as seen:
        failures = queries.failed_calls(run)
    assert failures.count == 1 and len(seen) == 3
    if connection.vendor == "sqlite":  # each of the three reads goes through the partial index
        with connection.cursor() as cursor:
            for query in seen.captured_queries:
                cursor.execute("EXPLAIN QUERY PLAN " + query["sql"])
                plan = " ".join(str(row) for row in cursor.fetchall())
                assert "USING INDEX turn_run_failed_idx" in plan, plan


def streak_rule(project, alice, **kw):
    return services.create_alert_rule(
        project, by=alice, trigger=Trigger.RUN_ERRORS, channel=Channel.INBOX, recipient="alice", **kw
    )


def raised(rule) -> list[Notification]:
    return list(rule.notifications.exclude(status=NotificationStatus.SUPPRESSED).order_by("created", "id"))


@pytest.mark.django_db
def test_an_error_streak_alerts_once_per_streak(project, alice):
    rule = streak_rule(project, alice, window=3)
    push(project, "s1", call(0), call(1, ok=False), call(2, ok=False))
    evaluation.evaluate_run(Run.objects.get(external_id="s1").pk)
    assert raised(rule) == []  # two in a row: below the rule's 3
    push(project, "s1", call(3, ok=False))
    evaluation.evaluate_run(Run.objects.get(external_id="s1").pk)
    [first] = raised(rule)
    assert "its last 3 calls failed" in first.title and "RateLimitError (HTTP 429)" in first.title
    assert "since driver #1" in first.body and "Rate limit reached for gpt-4o" in first.body
    push(project, "s1", call(4, ok=False), call(5, ok=False))  # the same streak, longer
    evaluation.evaluate_run(Run.objects.get(external_id="s1").pk)
    assert len(raised(rule)) == 1
    push(project, "s1", call(6), *[call(n, ok=False) for n in (7, 8, 9)])  # a success, then a new streak
    evaluation.evaluate_run(Run.objects.get(external_id="s1").pk)
    assert len(raised(rule)) == 2 and "since driver #7" in raised(rule)[1].body
    # A late success in the middle of the streak (by time) ends it: the newest calls no longer all failed.
    push(project, "s1", call(10), call(11, ok=False), call(12, ok=False))
    evaluation.evaluate_run(Run.objects.get(external_id="s1").pk)
    assert len(raised(rule)) == 2


@pytest.mark.django_db
def test_a_new_streak_rule_does_not_announce_a_streak_already_running(project, alice):
    push(project, "s2", *[call(n, ok=False) for n in range(6)])
    rule = streak_rule(project, alice)  # default k = 5: the running streak is the baseline
    evaluation.evaluate_run(Run.objects.get(external_id="s2").pk)
    assert raised(rule) == []
    push(project, "s2", call(6), *[call(n, ok=False) for n in range(7, 12)])
    evaluation.evaluate_run(Run.objects.get(external_id="s2").pk)
    assert len(raised(rule)) == 1


@pytest.mark.django_db
def test_the_timeline_marks_failed_calls(project, client_alice):
    push(project, "tl", call(0), call(1, ok=False), call(2))
    page = client_alice.get(f"/projects/{project.slug}/runs/tl/").content.decode()
    figure = json.loads(
        page.split('id="run-timeline-data" type="application/json">')[1].split("</script>")[0]
    )
    [marks] = [t for t in figure["data"] if t.get("name") == "failed calls"]
    assert marks["customdata"] == ["driver #1: RateLimitError (HTTP 429)"] and marks["yaxis"] == "y2"
    push(project, "quiet", call(0))
    quiet = client_alice.get(f"/projects/{project.slug}/runs/quiet/").content.decode()
    assert '"failed calls"' not in quiet.split('id="run-timeline-data"')[1].split("</script>")[0]
