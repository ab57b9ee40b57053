"""Starting the next run, in the write path: who may, what is checked, one launch per idempotency key
(also under concurrent requests), the prefill, and the new run linked to its parent wherever it is
born (ingest, a poll) and whichever comes first (the source's answer or the run)."""

from __future__ import annotations

import hashlib
import hmac
import json
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

import pytest
from django.db import close_old_connections

from smrweb.outbound import webhooks
from smrweb.tracking import queries, services
from smrweb.tracking.errors import InvalidInput, KeyReused, LaunchRefused, NotAllowed
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import AuditEvent, Run, RunLaunch
from smrweb.tracking.services import dispatched, knowledge, launches
from smrweb.tracking.services.capabilities import Action, may, refusal

pytestmark = pytest.mark.django_db

KEY = "11111111-2222-4333-8444-555555555555"


def ingest(project, run_id: str, *events: dict):
    return services.ingest_events(project, run_id, parse_events(json.dumps(list(events))))


@pytest.fixture
def hooked(project):
    """A push project with a webhook (so it can start runs) and a finished run to start from."""
    services.update_project(project, rollback_webhook_url="https://hooks.example/hill")
    ingest(
        project,
        "r1",
        {"type": "message", "id": "k", "body": "first kickoff"},
        {"type": "score", "id": "s1", "score": 0.4},
        {"type": "state", "id": "d", "state": "failed", "failure": {"family": "oom", "detail": "killed"}},
    )
    services.update_run_settings(
        project, "r1", budget_usd=Decimal("2.5"), budget_tokens=1_500_000, requested_profile="codex_medium"
    )
    return project


def ask(project, by, key=KEY, **overrides):
    fields = {"kickoff": "go on", "idempotency_key": key, **overrides}
    return launches.request_launch(project, by=by, **fields)


def test_a_reviewer_asks_and_the_request_is_audited_with_a_run_id_chosen_for_the_harness(hooked, bob):
    r1 = Run.objects.get(external_id="r1")
    launch, created = ask(hooked, bob, from_run=r1, budget_usd="3.25", budget_tokens="2000000")
    assert created and launch.status == "requested" and launch.requested_by == bob
    assert (launch.budget_usd, launch.budget_tokens, launch.external_run_id) == (
        Decimal("3.25"),
        2_000_000,
        "r1-next-1",
    )
    event = AuditEvent.objects.get(verb="launch.requested")
    assert (
        event.actor == bob and event.detail["from_run"] == "r1" and event.detail["budget_usd"] == "3.250000"
    )
    # The next one from the same run gets the next number; from a "-next-" run the suffix is not stacked.
    second, _ = ask(hooked, bob, key="second-key-0001", from_run=r1)
    assert second.external_run_id == "r1-next-2"
    ingest(hooked, "r1-next-1", {"type": "state", "state": "running"})
    third, _ = ask(hooked, bob, key="third-key-00001", from_run=Run.objects.get(external_id="r1-next-1"))
    assert third.external_run_id == "r1-next-3"
    fourth, _ = ask(hooked, bob, key="fourth-key-0001")
    assert fourth.external_run_id.startswith("run-") and len(fourth.external_run_id) == 12


def test_viewers_outsiders_and_tokens_cannot_start_runs(hooked, victor, carol):
    token, _ = services.create_api_token(hooked, name="ci")
    for who in (victor, carol, token):
        with pytest.raises(NotAllowed):
            ask(hooked, who)
    assert not RunLaunch.objects.exists()


def test_a_push_project_without_a_webhook_is_refused_with_the_reason(project, bob):
    assert "no webhook URL" in refusal(project, Action.LAUNCH)
    with pytest.raises(LaunchRefused, match="no webhook URL"):
        ask(project, bob)
    assert not may(bob, project, Action.LAUNCH)
    services.update_project(project, rollback_webhook_url="https://hooks.example/hill")
    assert may(bob, project, Action.LAUNCH) and not may(Run(), project, Action.LAUNCH)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("budget_usd", "-1", "positive"),
        ("budget_usd", "0", "positive"),
        ("budget_usd", "NaN", "positive"),
        ("budget_usd", "Infinity", "positive"),
        ("budget_usd", "1e400", "At most"),
        ("budget_usd", "1000000.01", "At most"),
        ("budget_usd", "0.0000001", "six decimal places"),
        ("budget_usd", "two", "A budget in USD"),
        ("budget_usd", True, "A budget in USD"),
        ("budget_tokens", "0", "positive"),
        ("budget_tokens", -5, "positive"),
        ("budget_tokens", 10**13, "At most"),
        ("budget_tokens", "1.5", "whole number"),
        ("budget_tokens", float("nan"), "whole number"),
        ("kickoff", "   ", "empty"),
        ("kickoff", "x" * 50_001, "at most 50,000"),
        ("kickoff", "nul \x00", "NUL"),
        ("model_profile", "two words", "model profile"),
        ("git_commit", "abc123", "projects whose source is git"),
        ("idempotency_key", "short", "idempotency key"),
        ("idempotency_key", "has spaces in it", "idempotency key"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_nothing_is_written(hooked, bob, field, value, message):
    fields = {"kickoff": "go", "idempotency_key": KEY, field: value}
    with pytest.raises(InvalidInput, match=message) as caught:
        launches.request_launch(hooked, by=bob, **fields)
    assert caught.value.field == field
    assert not RunLaunch.objects.exists() and not AuditEvent.objects.filter(verb="launch.requested").exists()


def test_a_run_of_another_project_is_refused(hooked, other_project, bob):
    ingest(other_project, "o1", {"type": "state", "state": "running"})
    with pytest.raises(InvalidInput, match="not a run of hill"):
        ask(hooked, bob, from_run=Run.objects.get(external_id="o1"))


def test_the_same_key_replays_the_launch_and_another_request_under_it_is_refused(hooked, bob, alice):
    first, created = ask(hooked, bob, budget_usd="2.50")
    again, created_again = ask(hooked, alice, budget_usd=Decimal("2.5"))  # same request, another click
    assert (created, created_again) == (True, False) and again.pk == first.pk
    with pytest.raises(KeyReused):
        ask(hooked, bob, budget_usd="9")
    assert RunLaunch.objects.count() == 1
    assert AuditEvent.objects.filter(verb="launch.requested").count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_with_one_key_make_one_launch(hooked, bob, alice):
    def request(user):
        close_old_connections()
        try:
            return ask(hooked, user)[1]
        finally:
            close_old_connections()

    with ThreadPoolExecutor(max_workers=4) as pool:
        created = list(pool.map(request, [bob, alice, bob, alice]))
    assert created.count(True) == 1 and RunLaunch.objects.count() == 1


def test_the_prefill_takes_the_runs_profile_budget_and_the_carry_forward_block(hooked, bob):
    r1 = Run.objects.get(external_id="r1")
    knowledge.add_entry(hooked, by=bob, kind="failed_approach", title="Huge batch", body="ran out of memory")
    defaults = queries.launch_defaults(hooked, r1, n=5)
    assert (defaults.model_profile, defaults.budget_usd, defaults.budget_tokens) == (
        "codex_medium",
        Decimal("2.5"),
        1_500_000,
    )
    assert defaults.from_run == r1 and defaults.scenario == hooked.scenario and defaults.git_commit == ""
    assert defaults.carry_forward.startswith("## Carry-forward: hill (maximize score)")
    assert (
        "Huge batch" in defaults.carry_forward
        and "Last 2 failed or regressed approaches" in defaults.carry_forward
    )
    # Without a run: the project's latest run is the template, nothing is its parent.
    ingest(hooked, "r2", {"type": "state", "state": "running"})
    latest = queries.launch_defaults(hooked)
    assert latest.from_run is None and latest.template.external_id == "r2" and latest.model_profile == ""
    assert launches.compose_kickoff("  block \n", "\n mine ") == "block\n\nmine"
    assert launches.compose_kickoff("", "only mine") == "only mine"


def test_the_new_run_born_by_ingest_is_linked_to_its_parent_and_the_launch_confirmed(hooked, bob):
    r1 = Run.objects.get(external_id="r1")
    launch, _ = ask(hooked, bob, from_run=r1, budget_usd="3", model_profile="codex_small")
    dispatched.start_attempt(RunLaunch, launch.pk)
    launches.record_accepted(launch.pk, external_run_id=launch.external_run_id, detail="HTTP 200")
    assert RunLaunch.objects.get().status == "accepted"

    ingest(hooked, "r1-next-1", {"type": "message", "body": "go on"}, {"type": "state", "state": "running"})
    launch.refresh_from_db()
    run = Run.objects.get(external_id="r1-next-1")
    assert launch.status == "confirmed" and launch.run == run and launch.finished_at is not None
    assert run.parent == r1 and list(r1.children.all()) == [run]
    # What was asked for, where the harness has not said otherwise.
    assert (run.budget_usd, run.requested_profile) == (Decimal("3"), "codex_small")
    assert "run r1-next-1 appeared" in launch.detail
    assert [e.verb for e in AuditEvent.objects.filter(object_type="runlaunch").order_by("id")] == [
        "launch.requested",
        "launch.dispatched",
        "launch.accepted",
        "launch.confirmed",
    ]
    # Later events of the run change nothing of the link.
    ingest(hooked, "r1-next-1", {"type": "score", "score": 0.6})
    assert RunLaunch.objects.get().run_id == run.pk and Run.objects.get(pk=run.pk).parent_id == r1.pk


def test_a_run_seen_before_the_sources_answer_is_linked_when_the_answer_is_recorded(hooked, bob):
    r1 = Run.objects.get(external_id="r1")
    launch, _ = ask(hooked, bob, from_run=r1)
    dispatched.start_attempt(RunLaunch, launch.pk)
    services.record_poll(hooked, "smr-run-42", live_phase="queued")  # a poll got there first
    assert RunLaunch.objects.get().run is None
    launches.record_accepted(launch.pk, external_run_id="smr-run-42", detail="SMR started run smr-run-42")
    launch.refresh_from_db()
    assert launch.status == "confirmed" and launch.run.external_id == "smr-run-42"
    assert Run.objects.get(external_id="smr-run-42").parent == r1


def test_an_accepted_launch_whose_run_never_reports_ends_failed_and_a_late_run_still_links(
    hooked, bob, client, settings
):
    from datetime import timedelta

    from django.utils import timezone

    settings.SMRWEB_LAUNCH_APPEAR_SECONDS = 600
    r1 = Run.objects.get(external_id="r1")
    launch, _ = ask(hooked, bob, from_run=r1)
    dispatched.start_attempt(RunLaunch, launch.pk)
    launches.record_accepted(launch.pk, external_run_id="r1-next-1", detail="HTTP 202")
    accepted_at = RunLaunch.objects.get().updated
    assert launches.expire_unseen(now=accepted_at + timedelta(seconds=599)) == []  # still within the wait
    [expired] = launches.expire_unseen(now=accepted_at + timedelta(seconds=601))
    assert expired.status == "failed" and "no run r1-next-1 reported within 10 min" in expired.detail
    event = AuditEvent.objects.get(verb="launch.unseen")
    assert event.detail["run"] == "r1-next-1" and event.detail["waited_seconds"] == 600
    assert launches.expire_unseen(now=timezone.now() + timedelta(days=1)) == []  # once
    client.force_login(bob)
    page = client.get(f"/projects/{hooked.slug}/launches/{launch.pk}/").content.decode()
    assert "data-launch-unseen" in page and "r1-next-1" in page

    ingest(hooked, "r1-next-1", {"type": "state", "state": "running"})  # it reports after all
    launch.refresh_from_db()
    assert launch.status == "confirmed" and launch.run.external_id == "r1-next-1"
    assert Run.objects.get(external_id="r1-next-1").parent == r1


def test_a_finished_launch_is_not_attempted_again_and_failures_are_recorded(hooked, bob):
    launch, _ = ask(hooked, bob)
    assert dispatched.start_attempt(RunLaunch, launch.pk).attempts == 1
    dispatched.note_attempt(RunLaunch, launch.pk, "attempt 1: HTTP 503; retrying in 1 s")
    assert dispatched.start_attempt(RunLaunch, launch.pk).attempts == 2
    dispatched.failed(RunLaunch, launch.pk, detail="attempt 2: HTTP 400; giving up")
    launch.refresh_from_db()
    assert launch.status == "failed" and "HTTP 503" in launch.detail and "HTTP 400" in launch.detail
    assert (
        dispatched.start_attempt(RunLaunch, launch.pk) is None
        and dispatched.failed(RunLaunch, launch.pk, detail="again") is None
    )
    assert AuditEvent.objects.get(verb="launch.failed").detail["detail"] == "attempt 2: HTTP 400; giving up"


def test_the_start_webhook_is_signed_with_the_projects_secret_and_carries_the_key(hooked, bob):
    r1 = Run.objects.get(external_id="r1")
    launch, _ = ask(
        hooked, bob, from_run=r1, budget_usd="2.5", budget_tokens=1000, model_profile="codex_small"
    )
    body, headers = webhooks.start_request(launch)
    payload = json.loads(body)
    assert payload == {
        "type": "smrweb.start",
        "launch_id": launch.pk,
        "project": "hill",
        "run_id": "r1-next-1",
        "from_run": "r1",
        "kickoff": "go on",
        "model_profile": "codex_small",
        "budget": {"usd": "2.500000", "tokens": 1000},
        "scenario": hooked.scenario.key,
        "requested_by": "bob",
        "requested_at": launch.created.isoformat(),
    }
    secret = webhooks.webhook_secret(hooked)
    stamp = headers["X-Smrweb-Timestamp"]
    expected = hmac.new(secret.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    assert headers["X-Smrweb-Signature"] == f"sha256={expected}" and headers["Idempotency-Key"] == KEY


def test_the_admin_shows_launches_read_only(client, hooked, bob):
    from tests.factories import UserFactory

    launch, _ = ask(hooked, bob)
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    assert client.get("/admin/tracking/runlaunch/").status_code == 200
    assert client.get(f"/admin/tracking/runlaunch/{launch.pk}/change/").status_code == 200
    assert client.get("/admin/tracking/runlaunch/add/").status_code == 403
