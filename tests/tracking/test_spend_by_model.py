"""Spend by model and by day (issue 37 item 2): kept per run, model and quarter hour by the write path,
summing to the run's spend; the project's days in any viewer's clock; the API and the project page's card."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from smrweb.tracking import queries, services
from smrweb.tracking.models import AgentTurn, ModelPrice, Run, RunModelSpend
from tests.factories import push


def turn(n: int, at: datetime, model: str, tokens_in: int, tokens_out: int = 0, **extra) -> dict:
    return {
        "type": "agent.turn",
        "turn": n,
        "ts": at.isoformat(),
        "model": model,
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        **extra,
    }


def from_turns(project) -> dict:
    """The kept rows, recomputed from the turns (the reference)."""
    out: dict = defaultdict(lambda: [Decimal(0), 0, 0, 0, 0])
    for t in AgentTurn.objects.filter(run__project=project):
        row = out[t.run_id, int(t.ts.timestamp()) // 900, t.model]
        row[0] += t.cost_usd
        row[1] += 1
        row[2] += t.tokens_in
        row[3] += t.tokens_out
        row[4] += t.cost_origin == "unpriced"
    return {k: tuple(v) for k, v in out.items()}


def kept(project) -> dict:
    return {
        (r.run_id, r.slot, r.model): (r.cost_usd, r.turns, r.tokens_in, r.tokens_out, r.unpriced)
        for r in RunModelSpend.objects.filter(project=project)
    }


@pytest.mark.django_db
def test_kept_spend_equals_the_turns_after_random_ingest_repricing_and_deletion(project, alice):
    rng = random.Random(37)
    start = datetime(2026, 3, 1, 22, 50, tzinfo=UTC)
    models = ["gpt-4o", "claude-sonnet-4", "house-llm", ""]
    next_turn: dict = defaultdict(int)
    for step in range(40):
        run = f"r{rng.randrange(4)}"
        batch = []
        for _ in range(rng.randrange(1, 6)):
            n = next_turn[run]
            next_turn[run] += 1
            at = start + timedelta(minutes=rng.randrange(0, 600))  # late and early turns, across midnight
            extra = {"cost_usd": round(rng.random(), 4)} if rng.random() < 0.3 else {}
            batch.append(
                turn(n, at, rng.choice(models), rng.randrange(0, 5000), rng.randrange(0, 500), **extra)
            )
        if rng.random() < 0.2:
            batch.append(dict(batch[0]))  # a replay inside the batch: a duplicate, counted once
        push(project, run, *batch)
        if step == 25:  # a price for house-llm arrives; the stored unpriced turns are priced again
            ModelPrice.objects.create(model="house-llm", input=Decimal(1), output=Decimal(2))
            for r in Run.objects.filter(project=project, unpriced_turns__gt=0):
                services.reprice_turns(r)
        assert kept(project) == from_turns(project), step
    # Every run's breakdown by model sums to its own columns.
    for run in Run.objects.filter(project=project):
        parts = queries.run_spend_by_model(run)
        assert sum(p.usd for p in parts) == run.cost_usd
        assert sum(p.turns for p in parts) == run.turn_count
        assert sum(p.tokens_in for p in parts) == run.tokens_in
        assert sum(p.tokens_out for p in parts) == run.tokens_out
        assert sum(p.unpriced_turns for p in parts) == run.unpriced_turns
        assert [p.usd for p in parts] == sorted((p.usd for p in parts), reverse=True)
    # Deleting a run takes its rows; a rebuild from the turns gives the same rows.
    victim = Run.objects.filter(project=project).first()
    services.delete_runs(project, [victim.pk], by=None) if hasattr(
        services, "delete_runs"
    ) else victim.delete()
    assert not RunModelSpend.objects.filter(run_id=victim.pk).exists()
    before = kept(project)
    from smrweb.tracking.services.figures import rebuild_day_spend

    rebuild_day_spend(Run.objects.filter(project=project).values_list("pk", flat=True))
    assert kept(project) == before == from_turns(project)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("zone", "expected"),
    [
        # Turns at 23:50 UTC on Mar 1 and 00:10 UTC on Mar 2 ($1 and $2 of gpt-4o input).
        ("UTC", {date(2026, 3, 1): Decimal(1), date(2026, 3, 2): Decimal(2)}),
        ("America/New_York", {date(2026, 3, 1): Decimal(3)}),  # 18:50 and 19:10 on Mar 1 (EST)
        ("Asia/Kolkata", {date(2026, 3, 2): Decimal(3)}),  # 05:20 and 05:40 on Mar 2 (+05:30)
        ("Asia/Kathmandu", {date(2026, 3, 2): Decimal(3)}),  # +05:45: a quarter hour divides every zone
    ],
)
def test_days_are_the_viewers_days(project, zone, expected):
    push(
        project,
        "d1",
        turn(0, datetime(2026, 3, 1, 23, 50, tzinfo=UTC), "gpt-4o", 400_000),
        turn(1, datetime(2026, 3, 2, 0, 10, tzinfo=UTC), "gpt-4o", 800_000),
    )
    spend = queries.project_spend_by_day(project, zone, 7, today=date(2026, 3, 4))
    assert spend.days == [date(2026, 2, 26) + timedelta(days=i) for i in range(7)]
    got = {d: v for d, v in zip(spend.days, spend.usd["gpt-4o"], strict=True) if v}
    assert got == expected
    assert spend.total_usd == Decimal(3)


@pytest.mark.django_db
def test_a_quarter_hour_off_midnight_in_an_odd_zone_lands_on_its_local_day(project):
    # 18:30 UTC is 00:00 of the next day in Kolkata (+05:30); 18:15 UTC is still 23:45 the day before.
    push(
        project,
        "d2",
        turn(0, datetime(2026, 3, 1, 18, 15, tzinfo=UTC), "gpt-4o", 400_000),
        turn(1, datetime(2026, 3, 1, 18, 30, tzinfo=UTC), "gpt-4o", 800_000),
    )
    spend = queries.project_spend_by_day(project, "Asia/Kolkata", 3, today=date(2026, 3, 2))
    assert spend.usd["gpt-4o"] == [Decimal(0), Decimal(1), Decimal(2)]
    assert datetime(2026, 3, 1, 18, 30, tzinfo=UTC).astimezone(ZoneInfo("Asia/Kolkata")).date() == date(
        2026, 3, 2
    )


@pytest.mark.django_db
def test_reading_spend_does_not_read_turns_and_costs_one_query(project):
    at = datetime(2026, 3, 1, 12, tzinfo=UTC)
    push(project, "q1", *[turn(i, at + timedelta(seconds=i), "gpt-4o", 10) for i in range(50)])
    run = Run.objects.get(external_id="q1")
    with CaptureQueriesContext(connection) as few:
        queries.run_spend_by_model(run)
        queries.project_spend_by_day(project, "UTC", 30, today=date(2026, 3, 10))
    push(project, "q1", *[turn(50 + i, at + timedelta(seconds=50 + i), "gpt-4o", 10) for i in range(2000)])
    with CaptureQueriesContext(connection) as many:
        queries.run_spend_by_model(run)
        queries.project_spend_by_day(project, "UTC", 30, today=date(2026, 3, 10))
    assert len(few) == len(many) == 2
    assert not any("agentturn" in q["sql"].lower() for q in many.captured_queries)


@pytest.mark.django_db
def test_api_run_spend_by_model_and_project_spend(api, project):
    now = datetime.now(UTC).replace(microsecond=0)
    push(
        project,
        "a1",
        turn(0, now, "gpt-4o", 1_000_000),
        turn(1, now, "claude-sonnet-4", 1_000_000),
        turn(2, now, "house-llm", 10),
    )
    body = api.get(f"/api/v1/projects/{project.slug}/runs/a1").json()
    by_model = body["spend"]["by_model"]
    assert [(m["model"], m["usd"], m["turns"], m["unpriced_turns"]) for m in by_model] == [
        ("claude-sonnet-4", "3.000000", 1, 0),
        ("gpt-4o", "2.500000", 1, 0),
        ("house-llm", "0.000000", 1, 1),
    ]
    assert sum(Decimal(m["usd"]) for m in by_model) == Decimal(body["spend"]["usd"])
    # The list stays one query for the runs (no breakdown per run there).
    assert "by_model" not in api.get(f"/api/v1/projects/{project.slug}/runs").json()["results"][0]["spend"]
    spend = api.get(f"/api/v1/projects/{project.slug}/spend?days=7&tz=Europe/Paris").json()
    assert spend["tz"] == "Europe/Paris" and len(spend["days"]) == 7
    assert spend["models"] == ["claude-sonnet-4", "gpt-4o", "house-llm"]
    assert spend["usd"]["gpt-4o"][-1] == "2.500000" and spend["unpriced_turns"]["house-llm"][-1] == 1
    assert spend["total_usd"] == "5.500000"
    bad = api.get(f"/api/v1/projects/{project.slug}/spend?days=0&tz=Mars/Olympus")
    assert bad.status_code == 400
    assert {(e["field"], e["message"].split(":")[0]) for e in bad.json()["errors"]} == {
        ("days", "Ensure this value is greater than or equal to 1."),
        ("tz", "Unknown time zone 'Mars/Olympus'"),
    }


@pytest.mark.django_db
def test_the_project_page_card_shows_spend_by_model(project, client_alice):
    now = datetime.now(UTC).replace(microsecond=0)
    push(project, "c1", turn(0, now, "gpt-4o", 1_000_000), turn(1, now, "house-llm", 10))
    page = client_alice.get(f"/projects/{project.slug}/")
    assert f'hx-get="/projects/{project.slug}/spend/"' in page.content.decode()  # loaded on its own
    card = client_alice.get(f"/projects/{project.slug}/spend/", HTTP_HX_REQUEST="true")
    html = card.content.decode()
    assert card.status_code == 200 and "Spend by day" in html and "$2.50" in html
    assert '"name": "gpt-4o"' in html or '"name":"gpt-4o"' in html
    assert 'data-spend-unpriced="1"' in html
    version = html.split('"X-Smrweb-Version": "')[1].split('"')[0]
    again = client_alice.get(
        f"/projects/{project.slug}/spend/", HTTP_HX_REQUEST="true", HTTP_X_SMRWEB_VERSION=version
    )
    assert again.status_code == 204  # nothing new: the poll costs nothing
    push(project, "c1", turn(2, now, "gpt-4o", 10))
    moved = client_alice.get(
        f"/projects/{project.slug}/spend/", HTTP_HX_REQUEST="true", HTTP_X_SMRWEB_VERSION=version
    )
    assert moved.status_code == 200
    week = client_alice.get(f"/projects/{project.slug}/spend/?days=7", HTTP_HX_REQUEST="true")
    assert "the last 7 days" in week.content.decode()
    odd = client_alice.get(f"/projects/{project.slug}/spend/?days=abc", HTTP_HX_REQUEST="true")
    assert odd.status_code == 200 and "the last 30 days" in odd.content.decode()
