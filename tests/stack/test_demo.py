"""The demo's alerts: the seeded rules (every trigger to the demo user's inbox; failures, stalls, loops
and budgets by email at once, needs_review and new bests in a digest), and a
harness whose first runs loop, ping-pong and plateau — pushed through the real API, evaluated, and the
run.loop email delivered to the demo's mail catcher."""

from __future__ import annotations

import random
from pathlib import Path

import httpx
import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from smrweb.outbound import alerts as delivery
from smrweb.stack import harness
from smrweb.stack.mailcatcher import MailCatcher, free_port
from smrweb.stack.management.commands import runstack
from smrweb.tracking.models import AlertRule, LoopFinding, Notification, NotificationStatus, Run, Trigger
from smrweb.tracking.services.alerts import evaluation as alert_evaluation
from tests.stack.test_mailcatcher import use_email_url

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(settings, tmp_path) -> dict[str, str]:
    """The demo's projects, login and rules, seeded as runstack seeds them; the harness's tokens."""
    settings.DATA_DIR = tmp_path
    settings.SMRWEB_BASE_URL = "http://127.0.0.1:8000"
    call_command("load_presets", verbosity=0)
    token_file, _ = runstack.seed_demo(rollback_url="https://harness.example/rollback")
    return dict(line.split() for line in Path(token_file).read_text().splitlines())


def test_each_demo_project_has_every_trigger_in_the_inbox_and_email_digests_for_the_busy_ones(demo):
    for spec in harness.DEMO_PROJECTS:
        rules = AlertRule.objects.filter(project__slug=spec["slug"])
        inbox = rules.filter(channel="inbox", recipient__username=runstack.DEMO_USER)
        assert sorted(inbox.values_list("trigger", flat=True)) == sorted(Trigger.values)
        email = rules.filter(channel="email", target="demo@localhost")
        # At once what someone must act on; a digest for what comes by the hundred (issue 33 §5).
        immediate = email.filter(delivery="immediate")
        assert sorted(immediate.values_list("trigger", flat=True)) == sorted(runstack.DEMO_EMAIL_TRIGGERS)
        digests = email.filter(delivery="digest", digest_minutes=runstack.DEMO_DIGEST_MINUTES)
        assert sorted(digests.values_list("trigger", flat=True)) == sorted(runstack.DEMO_DIGEST_TRIGGERS)
        assert "submission.needs_review" in runstack.DEMO_DIGEST_TRIGGERS
        assert {"run.failed", "run.stalled"} <= set(runstack.DEMO_EMAIL_TRIGGERS)
        assert rules.count() == len(Trigger.values) + email.count() and email.count() == 6
    # A restarted demo adds none.
    runstack.seed_demo(rollback_url="https://harness.example/rollback")
    assert AlertRule.objects.count() == 2 * (len(Trigger.values) + 6)


def api_transport() -> httpx.MockTransport:
    """The harness's HTTP, answered in-process by the real API (Django's test client)."""

    def answer(request: httpx.Request) -> httpx.Response:
        response = APIClient().generic(
            request.method,
            request.url.raw_path.decode(),
            request.content,
            content_type=request.headers.get("content-type", ""),
            HTTP_AUTHORIZATION=request.headers["authorization"],
        )
        return httpx.Response(response.status_code, content=response.content)

    return httpx.MockTransport(answer)


def test_the_first_runs_trip_run_loop_and_run_no_progress_and_the_email_reaches_the_catcher(
    demo, settings, tmp_path
):
    sim = harness.Harness("http://demo.test", demo, random.Random(16))
    sim.client = httpx.Client(base_url="http://demo.test", transport=api_transport())
    project = next(p for p in harness.DEMO_PROJECTS if p["slug"] == "demo-optimizer")
    runs = {quirk: sim.start_run(project, quirk) for quirk in (*harness.FIRST_QUIRKS, "")}
    for quirk, run in runs.items():
        run.fate, run.length = "done", 200  # none ends or goes silent here
        for _ in range(run.quirk_at + 40 if quirk == "plateau" else run.quirk_at + 10):
            assert sim.step(run)
    row = {quirk: Run.objects.get(external_id=run.external_id) for quirk, run in runs.items()}
    for run in row.values():
        alert_evaluation.evaluate_run(run.pk)

    def notified(quirk: str, trigger: str):
        return Notification.objects.filter(run=row[quirk], rule__trigger=trigger)

    # The looping driver: the same call with the same arguments five times in a row.
    [finding] = LoopFinding.objects.filter(run=row["loops"], repeats__gte=3)
    assert (finding.pattern, finding.repeats, finding.actor) == ("repeat", harness.LOOP_TURNS, "driver")
    assert finding.call.startswith("run_harness(")
    assert {n.rule.channel for n in notified("loops", "run.loop")} == {"inbox", "email"}
    [pong] = LoopFinding.objects.filter(run=row["ping-pong"], pattern="ping-pong")
    assert pong.repeats == harness.PING_PONG_TURNS and "⇄" in pong.call
    assert notified("ping-pong", "run.loop").count() == 2
    # The plateau: 50 turns and more without a better score.
    [stuck] = notified("plateau", "run.no_progress")
    assert "no better score for" in stuck.title and stuck.status == NotificationStatus.SENT
    assert not notified("", "run.loop").exists() and not notified("", "run.no_progress").exists()

    # The run.loop email goes out through Django's SMTP backend to the mail catcher, as in the demo.
    [email] = notified("loops", "run.loop").filter(rule__channel="email")
    assert email.status == NotificationStatus.PENDING
    assert email.url.startswith("http://127.0.0.1:8000/projects/demo-optimizer/runs/")
    with MailCatcher(tmp_path / "mail", port=free_port(preferred=0)) as catcher:
        use_email_url(settings, catcher.url)
        assert delivery.deliver(email.pk).outcome == "sent"
        assert catcher.count == 1
        [message] = catcher.news()
    assert message.recipients == ["demo@localhost"] and message.trigger == "run.loop"
    assert "is looping: run_harness(" in message.subject
    [kept] = (tmp_path / "mail").glob("*-1.eml")
    assert email.url.encode() in kept.read_bytes()
