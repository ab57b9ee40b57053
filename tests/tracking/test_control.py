"""Steering a live run in the domain (`services.control`): who may ask, what is refused and why, one request
however often it is clicked, the audit trail, the dispatch bookkeeping, and the confirmation ingest writes
when the source reports a message or a state back. The page offers the forms exactly when the domain
accepts a request (one rule, `capabilities.refusal(project, Action.STEER)`)."""

from __future__ import annotations

import json

import pytest
from django.db import transaction

from smrweb.tracking import services
from smrweb.tracking.errors import ControlRefused, InvalidInput, NotAllowed
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import AuditEvent, Project, Run, RunControl, SourceKind
from smrweb.tracking.services import dispatched
from smrweb.tracking.services.capabilities import Action, may, refusal
from smrweb.tracking.services.control import MESSAGE_MAX

pytestmark = pytest.mark.django_db

HOOK = "https://harness.example/hook"


def events(project, run_id: str, items: list[dict]) -> None:
    services.ingest_events(project, run_id, parse_events(json.dumps(items)))


@pytest.fixture
def steerable(project):
    """`hill` as a push project with a webhook, and a running run r1."""
    Project.objects.filter(pk=project.pk).update(rollback_webhook_url=HOOK)
    project.refresh_from_db()
    events(project, "r1", [{"type": "state", "state": "running"}])
    return project


def r1(project) -> Run:
    return Run.objects.select_related("project").get(project=project, external_id="r1")


# --- who may ask, and what is refused ------------------------------------------------------------------


def test_a_reviewer_sends_a_message_and_it_is_audited(steerable, bob):
    control = services.request_control(r1(steerable), by=bob, kind="message", body="  try cosine decay  ")
    assert control.is_new and control.kind == "message" and control.status == "requested"
    assert control.body == "try cosine decay"  # what the agent is told, without the surrounding blanks
    audit = AuditEvent.objects.get(verb="control.requested")
    assert (audit.actor, audit.object_type, audit.object_id) == (bob, "runcontrol", str(control.pk))
    assert audit.detail == {"run": "r1", "kind": "message", "body": "try cosine decay"}
    assert control.idempotency_key == f"smrweb-control-{control.pk}"


def test_viewers_and_project_tokens_cannot_steer(steerable, victor, carol):
    token, _ = services.create_api_token(steerable, name="harness")
    run = r1(steerable)
    with pytest.raises(NotAllowed, match="reviewer role"):
        services.request_control(run, by=victor, kind="pause")
    with pytest.raises(NotAllowed, match="reviewer role"):
        services.request_control(run, by=carol, kind="message", body="hi")
    with pytest.raises(NotAllowed, match="Project tokens cannot steer runs"):
        services.request_control(run, by=token, kind="message", body="hi")
    assert not RunControl.objects.exists()
    assert not AuditEvent.objects.filter(verb="control.requested").exists()


@pytest.mark.parametrize("state", ["done", "failed", "stopped", "abandoned"])
def test_a_finished_run_cannot_be_steered(steerable, bob, state):
    events(steerable, "r1", [{"type": "state", "state": state}])
    for kind, body in (("message", "hi"), ("pause", ""), ("resume", "")):
        with pytest.raises(ControlRefused, match=f"The run is {state}"):
            services.request_control(r1(steerable), by=bob, kind=kind, body=body)
    assert not RunControl.objects.exists()


def test_pause_only_a_running_run_and_resume_only_a_paused_one(steerable, bob):
    with pytest.raises(ControlRefused, match="not paused: there is nothing to resume"):
        services.request_control(r1(steerable), by=bob, kind="resume")
    pause = services.request_control(r1(steerable), by=bob, kind="pause")
    # A second click while the first is still being sent is the same request, not a second one.
    again = services.request_control(r1(steerable), by=bob, kind="pause")
    assert (again.pk, again.is_new) == (pause.pk, False)
    with pytest.raises(ControlRefused, match=r"A pause of this run is on its way \(requested\); resume once"):
        services.request_control(r1(steerable), by=bob, kind="resume")
    services.control_accepted(pause.pk, detail="the webhook answered HTTP 202")
    with pytest.raises(ControlRefused, match=r"on its way \(accepted\); resume once the run reports paused"):
        services.request_control(r1(steerable), by=bob, kind="resume")
    events(steerable, "r1", [{"type": "state", "state": "paused"}])
    with pytest.raises(ControlRefused, match="already paused; resume it instead"):
        services.request_control(r1(steerable), by=bob, kind="pause")
    resume = services.request_control(r1(steerable), by=bob, kind="resume")
    assert resume.is_new and RunControl.objects.count() == 2


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("", "Write the message to send"),
        ("   \n ", "Write the message to send"),
        ("x" * (MESSAGE_MAX + 1), "10,001"),
    ],
)
def test_a_message_needs_one_to_ten_thousand_characters(steerable, bob, body, message):
    with pytest.raises(InvalidInput, match=message) as refused:
        services.request_control(r1(steerable), by=bob, kind="message", body=body)
    assert refused.value.field == "body"
    assert services.request_control(r1(steerable), by=bob, kind="message", body="y" * MESSAGE_MAX).is_new


def test_an_unknown_kind_is_refused_by_field(steerable, bob):
    with pytest.raises(InvalidInput) as refused:
        services.request_control(r1(steerable), by=bob, kind="reboot")
    assert refused.value.field == "kind"


def test_the_same_message_twice_while_it_is_sent_is_one_request_but_a_colleague_s_is_another(
    steerable, alice, bob
):
    first = services.request_control(r1(steerable), by=bob, kind="message", body="widen the MLP")
    again = services.request_control(r1(steerable), by=bob, kind="message", body="widen the MLP")
    other = services.request_control(r1(steerable), by=bob, kind="message", body="narrow it")
    hers = services.request_control(r1(steerable), by=alice, kind="message", body="widen the MLP")
    assert again.pk == first.pk and not again.is_new
    assert other.is_new and hers.is_new
    services.control_accepted(first.pk, detail="taken")  # sent: the same words again are a new message
    assert services.request_control(r1(steerable), by=bob, kind="message", body="widen the MLP").is_new


def test_git_projects_and_push_projects_without_a_webhook_say_why(project, bob):
    events(project, "r1", [{"type": "state", "state": "running"}])
    assert "no webhook URL" in refusal(project, Action.STEER)
    with pytest.raises(ControlRefused, match="no webhook URL"):
        services.request_control(r1(project), by=bob, kind="pause")
    Project.objects.filter(pk=project.pk).update(source=SourceKind.GIT)
    project.refresh_from_db()
    assert "Git workspace projects cannot be steered" in refusal(project, Action.STEER)
    with pytest.raises(ControlRefused, match="has no way to talk to the agent"):
        services.request_control(r1(project), by=bob, kind="message", body="hi")
    Project.objects.filter(pk=project.pk).update(source=SourceKind.SMR)
    project.refresh_from_db()
    assert refusal(project, Action.STEER) == ""


class _Undo(Exception):
    """Rolls the probe's transaction back: asking must not leave a request behind."""


def _domain_accepts(run, user) -> bool:
    try:
        with transaction.atomic():
            services.request_control(run, by=user, kind="message", body="probe")
            raise _Undo
    except _Undo:
        return True
    except (ControlRefused, NotAllowed):
        return False


@pytest.mark.parametrize(
    ("source", "webhook"),
    [(SourceKind.PUSH, ""), (SourceKind.PUSH, HOOK), (SourceKind.SMR, ""), (SourceKind.GIT, "")],
)
@pytest.mark.parametrize("who", ["alice", "bob", "victor"])
def test_the_run_page_offers_steering_exactly_when_the_domain_accepts_it(
    client, project, source, webhook, who, request
):
    Project.objects.filter(pk=project.pk).update(source=source, rollback_webhook_url=webhook)
    project.refresh_from_db()
    events(project, "r1", [{"type": "state", "state": "running"}])
    user = request.getfixturevalue(who)
    accepts = _domain_accepts(r1(project), user)
    assert may(user, project, Action.STEER) is accepts
    assert not RunControl.objects.exists()
    client.force_login(user)
    html = client.get("/projects/hill/runs/r1/").content.decode()
    assert ('data-steer="message"' in html) is accepts, (source, webhook, who)
    assert ('data-steer="pause"' in html) is accepts
    if accepts is False and who != "victor":  # a reviewer hears why
        assert refusal(project, Action.STEER).replace("'", "&#x27;") in html


# --- the dispatch bookkeeping ---------------------------------------------------------------------------


def test_attempts_are_counted_and_a_finished_request_is_not_sent_again(steerable, bob):
    control = services.request_control(r1(steerable), by=bob, kind="pause")
    first = dispatched.start_attempt(RunControl, control.pk)
    assert (first.status, first.attempts) == ("dispatched", 1) and first.dispatched_at is not None
    dispatched.note_attempt(RunControl, control.pk, "attempt 1: HTTP 503; retrying in 5 s")
    second = dispatched.start_attempt(RunControl, control.pk)
    assert second.attempts == 2 and second.dispatched_at == first.dispatched_at
    services.control_accepted(control.pk, detail="attempt 2: the webhook answered HTTP 202", source_ref="k-1")
    assert dispatched.start_attempt(RunControl, control.pk) is None  # a redelivered task does nothing
    control.refresh_from_db()
    assert (control.status, control.source_ref, control.attempts) == ("accepted", "k-1", 2)
    lines = control.detail.splitlines()
    assert lines[0].endswith("attempt 1: HTTP 503; retrying in 5 s") and lines[1].endswith("HTTP 202")
    verbs = list(
        AuditEvent.objects.filter(object_type="runcontrol").order_by("id").values_list("verb", flat=True)
    )
    assert verbs == ["control.requested", "control.dispatched", "control.accepted"]


def test_a_failed_request_says_why_and_is_audited(steerable, bob):
    control = services.request_control(r1(steerable), by=bob, kind="message", body="hi")
    dispatched.start_attempt(RunControl, control.pk)
    dispatched.failed(RunControl, control.pk, detail="attempt 1: the webhook answered HTTP 400; giving up")
    control.refresh_from_db()
    assert control.status == "failed" and control.finished_at is not None
    assert "HTTP 400; giving up" in control.detail
    assert AuditEvent.objects.get(verb="control.failed").detail["detail"].endswith("giving up")
    assert services.control_accepted(control.pk, detail="late") is None  # a failed one stays failed


# --- confirmed when the source reports it back -----------------------------------------------------------


def test_a_pushed_message_with_the_webhooks_message_id_confirms_it(steerable, bob):
    control = services.request_control(r1(steerable), by=bob, kind="message", body="try cosine decay")
    dispatched.start_attempt(RunControl, control.pk)
    # The harness reports it back before the webhook's answer arrives: confirmed all the same.
    events(steerable, "r1", [{"type": "message", "id": control.idempotency_key, "body": "try cosine decay"}])
    control.refresh_from_db()
    assert control.status == "confirmed" and "runtime messages show it" in control.detail
    services.control_accepted(control.pk, detail="attempt 1: the webhook answered HTTP 202")
    control.refresh_from_db()
    assert control.status == "confirmed" and control.detail.endswith("HTTP 202")
    audit = AuditEvent.objects.get(verb="control.confirmed")
    assert audit.actor is None and audit.detail["kind"] == "message"


def test_an_smr_message_is_matched_by_its_message_id_and_another_message_confirms_nothing(steerable, bob):
    control = services.request_control(r1(steerable), by=bob, kind="message", body="hi there")
    dispatched.start_attempt(RunControl, control.pk)
    services.control_accepted(control.pk, detail="SMR queued the message", source_ref="m-42")
    events(steerable, "r1", [{"type": "message", "id": "message:m-41", "body": "hi there"}])
    assert RunControl.objects.get().status == "accepted"  # same words, another message id
    events(steerable, "r1", [{"type": "message", "id": "message:m-42", "body": "hi there"}])
    assert RunControl.objects.get().status == "confirmed"


def test_without_a_reference_the_message_is_matched_by_its_words_once(steerable, bob):
    first = services.request_control(r1(steerable), by=bob, kind="message", body="same words")
    dispatched.start_attempt(RunControl, first.pk)
    services.control_accepted(first.pk, detail="no message id")
    services.request_control(r1(steerable), by=bob, kind="message", body="unsent")  # requested: not matched
    events(steerable, "r1", [{"type": "message", "id": "x1", "body": "other words"}])
    assert RunControl.objects.get(pk=first.pk).status == "accepted"
    events(steerable, "r1", [{"type": "message", "id": "x2", "body": "same words"}])
    assert RunControl.objects.get(pk=first.pk).status == "confirmed"
    assert RunControl.objects.exclude(pk=first.pk).get().status == "requested"


def test_pause_and_resume_are_confirmed_by_the_runs_state(steerable, bob):
    pause = services.request_control(r1(steerable), by=bob, kind="pause")
    dispatched.start_attempt(RunControl, pause.pk)
    services.control_accepted(pause.pk, detail="HTTP 202")
    events(steerable, "r1", [{"type": "metric", "key": "loss", "value": 1.0, "step": 1}])
    assert RunControl.objects.get(pk=pause.pk).status == "accepted"
    events(steerable, "r1", [{"type": "state", "state": "paused"}])
    pause.refresh_from_db()
    assert pause.status == "confirmed" and pause.detail.endswith("the run reported paused")
    resume = services.request_control(r1(steerable), by=bob, kind="resume")
    dispatched.start_attempt(RunControl, resume.pk)
    services.control_accepted(resume.pk, detail="HTTP 202")
    # (an id of its own: without one, a second "running" is the first one's replay)
    events(steerable, "r1", [{"type": "state", "id": "resumed", "state": "running"}])
    resume.refresh_from_db()
    assert resume.status == "confirmed" and resume.detail.endswith("the run reported running")


def test_a_pause_still_pending_when_the_run_ends_fails_saying_so(steerable, bob):
    pause = services.request_control(r1(steerable), by=bob, kind="pause")
    dispatched.start_attempt(RunControl, pause.pk)
    services.control_accepted(pause.pk, detail="HTTP 202")
    message = services.request_control(r1(steerable), by=bob, kind="message", body="hi")
    events(steerable, "r1", [{"type": "state", "state": "done"}])
    pause.refresh_from_db()
    assert pause.status == "failed" and "the run ended (done) before it reported the pause" in pause.detail
    assert RunControl.objects.get(pk=message.pk).status == "requested"  # the dispatcher says why


def test_ingest_without_pending_requests_costs_one_query(steerable, django_assert_num_queries):
    run = r1(steerable)
    with django_assert_num_queries(1):
        services.confirm_reported(run, messages=[("m", "x")], state_changed=True)
