"""/metrics for Prometheus: who may scrape it, and that what it says is what happened — read back with
Prometheus' own text parser (prometheus_client.parser), never by string matching."""

from __future__ import annotations

import os
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from smrweb.tracking import services
from smrweb.tracking.models import (
    Notification,
    NotificationStatus,
    Project,
    Rollback,
    RollbackStatus,
    Run,
    SourceHealth,
    Submission,
)
from tests.factories import admin_project

pytestmark = pytest.mark.django_db

EVENTS = "/api/v1/projects/hill/runs/{run}/events"


@pytest.fixture
def counters(settings, redis_server):
    """The shared counters on, under a prefix of this test's own (removed afterwards)."""
    prefix = f"smrweb-test-{os.getpid()}-{uuid.uuid4().hex[:8]}:ops"
    settings.SMRWEB_OPS_COUNTERS = True
    settings.SMRWEB_OPS_COUNTERS_PREFIX = prefix
    yield prefix
    for key in redis_server.scan_iter(f"{prefix}:*"):
        redis_server.delete(key)


def scrape(client, **headers) -> dict[str, dict[tuple, float]]:
    """{sample name: {sorted label pairs: value}} of one scrape, as Prometheus would parse it."""
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def value(samples, name, **labels) -> float:
    return samples.get(name, {}).get(tuple(sorted(labels.items())), 0.0)


# --- who may scrape ------------------------------------------------------------------------------------


def test_metrics_answers_loopback_and_refuses_other_networks(client, settings):
    settings.SMRWEB_METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 200  # the test client comes from 127.0.0.1
    refused = client.get("/metrics", REMOTE_ADDR="203.0.113.9")
    assert refused.status_code == 403
    assert b"SMRWEB_METRICS_TOKEN" in refused.content and b"SMRWEB_METRICS_ALLOW_IPS" in refused.content


def test_metrics_token_lets_a_scraper_in_from_anywhere_and_a_wrong_one_does_not(client, settings):
    import ipaddress

    settings.SMRWEB_METRICS_TOKEN = "scrape-secret"
    settings.SMRWEB_METRICS_ALLOW_IPS = [ipaddress.ip_network("10.0.0.0/8")]
    far = {"REMOTE_ADDR": "203.0.113.9"}
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret", **far).status_code == 200
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong", **far).status_code == 403
    assert client.get("/metrics", REMOTE_ADDR="10.2.3.4").status_code == 200
    assert client.get("/metrics").status_code == 403  # loopback is no longer in the list
    assert client.post("/metrics").status_code == 405


@pytest.mark.parametrize(
    "headers",
    [
        {"HTTP_X_FORWARDED_FOR": "203.0.113.9"},  # nginx on the same host, SMRWEB_TRUSTED_PROXY_COUNT=0
        {"HTTP_X_FORWARDED_FOR": "127.0.0.1"},
        {"HTTP_FORWARDED": "for=203.0.113.9"},
        {"HTTP_X_REAL_IP": "203.0.113.9"},
    ],
)
def test_a_forwarded_request_is_not_let_in_by_the_proxys_address(client, settings, headers):
    """Finding N6: behind a reverse proxy on the same host, every client arrived from 127.0.0.1 and was let
    in. A request that names another client is the proxy's: only the token lets it in."""
    settings.SMRWEB_METRICS_TOKEN = "scrape-secret"
    assert client.get("/metrics").status_code == 200  # a direct scrape from loopback
    assert client.get("/metrics", **headers).status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret", **headers).status_code == 200


@pytest.mark.parametrize("forwarded_for", ["127.0.0.1", "1.2.3.4,127.0.0.1", "127.0.0.1,1.2.3.4"])
def test_a_client_reaching_gunicorn_directly_cannot_spoof_loopback(client, settings, forwarded_for):
    """Finding N6, the review's table: with SMRWEB_TRUSTED_PROXY_COUNT=1, a client at 127.0.0.2 sending
    `X-Forwarded-For: 127.0.0.1` (or `1.2.3.4,127.0.0.1`) was let in."""
    settings.SMRWEB_TRUSTED_PROXY_COUNT, settings.SMRWEB_METRICS_TOKEN = 1, ""
    answer = client.get("/metrics", REMOTE_ADDR="127.0.0.2", HTTP_X_FORWARDED_FOR=forwarded_for)
    assert answer.status_code == 403 and b"not through a proxy" in answer.content


def test_check_deploy_warns_when_production_lets_loopback_in_without_a_token(settings):
    import ipaddress

    from smrweb.core.checks import metrics_open_to_loopback

    settings.PRODUCTION, settings.SMRWEB_METRICS_TOKEN = True, ""
    settings.SMRWEB_METRICS_ALLOW_IPS = [
        ipaddress.ip_network("127.0.0.1/32"),
        ipaddress.ip_network("::1/128"),
    ]
    [warning] = metrics_open_to_loopback(None)
    assert warning.id == "smrweb.W191" and "127.0.0.1/32, ::1/128 without a token" in warning.msg
    settings.SMRWEB_METRICS_ALLOW_IPS = [ipaddress.ip_network("10.0.0.0/8")]
    assert metrics_open_to_loopback(None) == []
    settings.SMRWEB_METRICS_ALLOW_IPS = [ipaddress.ip_network("0.0.0.0/0")]  # holds loopback too
    assert len(metrics_open_to_loopback(None)) == 1
    settings.SMRWEB_METRICS_TOKEN = "scrape-secret"
    assert metrics_open_to_loopback(None) == []
    settings.PRODUCTION = False
    settings.SMRWEB_METRICS_TOKEN = ""
    assert metrics_open_to_loopback(None) == []


def test_production_lets_no_network_in_by_default(tmp_path):
    """In production the allow-list is empty unless set: /metrics is token-only."""
    import subprocess
    import sys

    env = {
        **os.environ,
        "SMRWEB_PRODUCTION": "true",
        "SECRET_KEY": "x" * 60,
        "ALLOWED_HOSTS": "smrweb.example.com",
        "SMRWEB_DATA_DIR": str(tmp_path),
    }
    env.pop("SMRWEB_METRICS_ALLOW_IPS", None)
    shown = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; "
            "print(settings.SMRWEB_METRICS_ALLOW_IPS)",
        ],
        env={**env, "DJANGO_SETTINGS_MODULE": "smrweb.settings"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout.strip() == "[]"


def test_a_signed_in_project_admin_is_not_a_scraper(client, alice, project):
    client.force_login(alice)
    assert client.get("/metrics", REMOTE_ADDR="203.0.113.9").status_code == 403


# --- what it counts --------------------------------------------------------------------------------------


def test_ingest_requests_and_events_are_counted_by_outcome(
    client, api, project, counters, django_capture_on_commit_callbacks
):
    batch = [
        {"type": "metric", "key": "loss", "value": 0.5, "step": 1, "id": "m1"},
        {"type": "metric", "key": "loss", "value": 0.4, "step": 2, "id": "m2"},
        {"type": "agent.turn", "turn": 1, "tokens_in": 10, "tokens_out": 5, "cost_usd": 0.01},
    ]
    with django_capture_on_commit_callbacks(execute=True):  # the test's transaction never commits
        assert api.post(EVENTS.format(run="r1"), batch, format="json").json()["accepted"] == 3
        replay = api.post(EVENTS.format(run="r1"), batch, format="json").json()
    assert (replay["accepted"], replay["duplicates"]) == (0, 3)
    refused = api.post(EVENTS.format(run="r1"), [{"type": "metric", "key": "loss"}] * 2, format="json")
    assert refused.status_code == 400
    not_json = api.generic("POST", EVENTS.format(run="r1"), b"{", content_type="application/json")
    assert not_json.status_code == 400

    samples = scrape(client)
    assert value(samples, "smrweb_counters_up") == 1
    assert value(samples, "smrweb_ingest_requests_total", via="api", outcome="accepted") == 2
    assert value(samples, "smrweb_ingest_requests_total", via="api", outcome="refused") == 2
    assert value(samples, "smrweb_ingest_events_total", via="api", outcome="accepted") == 3
    assert value(samples, "smrweb_ingest_events_total", via="api", outcome="duplicate") == 3
    assert value(samples, "smrweb_ingest_events_total", via="api", outcome="refused") >= 3
    # The latency histogram saw all four requests; its buckets are cumulative and end at the count.
    assert value(samples, "smrweb_ingest_request_seconds_count", via="api") == 4
    assert value(samples, "smrweb_ingest_request_seconds_bucket", via="api", le="+Inf") == 4
    assert 0 < value(samples, "smrweb_ingest_request_seconds_sum", via="api") < 60
    buckets = sorted(
        (float(dict(labels)["le"]), count)
        for labels, count in samples["smrweb_ingest_request_seconds_bucket"].items()
        if dict(labels)["via"] == "api"
    )
    assert [count for _, count in buckets] == sorted(count for _, count in buckets)


def test_events_applied_by_the_shared_loop_are_counted_under_their_way_in(
    client, project, counters, django_capture_on_commit_callbacks
):
    from smrweb.sources.apply import apply_events

    items = [(n, {"type": "metric", "key": "acc", "value": n / 10, "step": n}) for n in range(5)]
    items.append((99, {"type": "metric", "key": "acc", "step": 6}))  # no value: refused, the rest written
    with django_capture_on_commit_callbacks(execute=True):
        applied = apply_events(project, "imported", items, on_refused="skip", via="jsonl")
    assert (applied.accepted, len(applied.refused)) == (5, 1)
    samples = scrape(client)
    assert value(samples, "smrweb_ingest_events_total", via="jsonl", outcome="accepted") == 5
    assert value(samples, "smrweb_ingest_events_total", via="jsonl", outcome="refused") == 1


@pytest.mark.django_db(transaction=True)
def test_events_written_inside_a_transaction_that_rolls_back_are_not_counted(client, alice, counters):
    from django.db import transaction

    from smrweb.sources.apply import apply_events

    project = admin_project("rolled", by=alice)
    items = [(n, {"type": "metric", "key": "acc", "value": n / 10, "step": n}) for n in range(4)]
    with pytest.raises(RuntimeError), transaction.atomic():
        assert apply_events(project, "r", items, via="jsonl").accepted == 4
        raise RuntimeError("the caller's own work failed after the events were applied")
    assert not Run.objects.filter(project=project).exists()  # nothing was written ...
    assert (
        value(scrape(client), "smrweb_ingest_events_total", via="jsonl", outcome="accepted") == 0
    )  # ... or counted
    assert apply_events(project, "r", items, via="jsonl").accepted == 4
    assert value(scrape(client), "smrweb_ingest_events_total", via="jsonl", outcome="accepted") == 4


def test_source_health_and_poll_lag_per_polled_project(client, alice, counters):
    smr, git = admin_project("lagging", by=alice), admin_project("broken", by=alice)
    Project.objects.filter(pk=smr.pk).update(source="smr")  # (the binding itself is not what is tested)
    Project.objects.filter(pk=git.pk).update(source="git")
    admin_project("pushed", by=alice)  # push projects are not polled: not reported
    now = timezone.now()
    SourceHealth.objects.update_or_create(
        project=smr, defaults={"last_attempt_at": now, "last_success_at": now - timedelta(seconds=300)}
    )
    SourceHealth.objects.update_or_create(
        project=git,
        defaults={
            "last_attempt_at": now,
            "last_error_at": now,
            "last_error": "fatal: not a git repository",
            "consecutive_failures": 4,
        },
    )
    samples = scrape(client)
    assert value(samples, "smrweb_source_up", project="lagging", source="smr") == 1
    assert value(samples, "smrweb_source_up", project="broken", source="git") == 0
    assert value(samples, "smrweb_source_consecutive_failures", project="broken", source="git") == 4
    assert 300 <= value(samples, "smrweb_poll_lag_seconds", project="lagging", source="smr") < 400
    assert ("project", "broken") not in dict(samples.get("smrweb_poll_lag_seconds", {})).keys()
    assert not any(dict(labels).get("project") == "pushed" for labels in samples["smrweb_source_up"])


def test_rollbacks_by_outcome_and_alert_deliveries(client, alice, project, counters):
    run = Run.objects.create(project=project, external_id="r1")
    submission = Submission.objects.create(
        project=project, run=run, event_id="s1", score=0.5, ts=timezone.now()
    )
    for status in (RollbackStatus.APPLIED, RollbackStatus.APPLIED, RollbackStatus.FAILED):
        Rollback.objects.create(
            run=run, target_submission=submission, reason="worse", status=status, requested_by=alice
        )
    rule = services.create_alert_rule(
        project, by=alice, trigger="run.failed", channel="webhook", target="https://hooks.example/a"
    )
    for n, (status, attempts) in enumerate(
        [(NotificationStatus.SENT, 1), (NotificationStatus.FAILED, 5), (NotificationStatus.FAILED, 5)]
    ):
        Notification.objects.create(
            rule=rule, subject=f"run:{n}", episode="e", title="t", body="b", url="/", status=status,
            attempts=attempts,
        )  # fmt: skip
    samples = scrape(client)
    assert value(samples, "smrweb_rollbacks_total", project="hill", status="applied") == 2
    assert value(samples, "smrweb_rollbacks_total", project="hill", status="failed") == 1
    assert value(samples, "smrweb_alert_notifications_total", channel="webhook", status="sent") == 1
    assert value(samples, "smrweb_alert_notifications_total", channel="webhook", status="failed") == 2
    assert value(samples, "smrweb_alert_delivery_attempts_total", channel="webhook") == 11


def test_celery_queue_depth_per_lane_from_the_real_broker(client, celery_queue, redis_server, counters):
    from smrweb.celery import app, lane_queue

    for _ in range(3):  # nobody consumes this session's queues outside the worker tests
        app.send_task("smrweb.sources.tasks.sync_project", args=[0], queue=lane_queue("polling"))
    try:
        samples = scrape(client)
        assert value(samples, "smrweb_broker_up") == 1
        assert value(samples, "smrweb_celery_queue_depth", queue=lane_queue("polling")) == 3
        assert value(samples, "smrweb_celery_queue_depth", queue=lane_queue("alerts")) == 0
    finally:
        redis_server.delete(lane_queue("polling"))


def test_counters_down_still_answers_with_what_it_can_read(client, settings, counters):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    samples = scrape(client)
    assert value(samples, "smrweb_counters_up") == 0
    assert value(samples, "smrweb_broker_up") == 1  # the broker is read all the same
