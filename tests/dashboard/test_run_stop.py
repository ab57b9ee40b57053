"""Stop on the run page asks the same table as the stop task and the budget guard
(`capabilities.refusal(project, Action.STOP)`): a reviewer stops a push run from its page (a signed stop
to the harness, through the real task and a real receiver); where the source cannot stop, the page says
why and the POST is refused with nothing recorded."""

from __future__ import annotations

import json

import pytest

from smrweb import tasks
from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import AuditEvent, Project, Run, SourceKind
from tests.sources.test_alert_delivery import Receiver

pytestmark = pytest.mark.django_db

PAGE = "/projects/hill/runs/r1/"
STOP = f'action="{PAGE}stop"'


@pytest.fixture
def hook():
    receiver = Receiver(200)
    yield receiver
    receiver.stop()


@pytest.fixture
def queued(monkeypatch):
    sent = []
    monkeypatch.setattr(tasks.stop_run, "delay_on_commit", sent.append)
    return sent


def running(project) -> Run:
    services.ingest_events(project, "r1", parse_events(b'[{"type": "state", "state": "running"}]'))
    return Run.objects.get(external_id="r1")


def test_a_reviewer_stops_a_push_run_from_its_page(client, project, bob, victor, hook, queued):
    services.update_project(project, rollback_webhook_url=hook.url)
    run = running(project)
    client.force_login(victor)  # a viewer sees no Stop
    assert STOP not in client.get(PAGE).content.decode()
    client.force_login(bob)
    page = client.get(PAGE).content.decode()
    assert STOP in page and ">Stop run</button>" in page
    response = client.post(f"{PAGE}stop", follow=True)
    assert "Asked the source to stop r1" in response.content.decode()
    assert queued == [run.pk] and AuditEvent.objects.filter(verb="run.stop_requested").count() == 1
    tasks.stop_run(*queued)  # the real task, to a real receiver
    sent = json.loads(hook.requests[0]["body"])
    assert sent["type"] == "smrweb.stop" and sent["reason"] == "a reviewer asked smrweb to stop the run"
    assert AuditEvent.objects.filter(verb="run.stopped").exists()


@pytest.mark.parametrize(
    ("source", "why"),
    [(SourceKind.PUSH, "no webhook URL"), (SourceKind.GIT, "Git workspace runs cannot be stopped")],
)
def test_where_the_source_cannot_stop_the_page_says_why_and_the_post_is_refused(
    client, project, bob, queued, source, why
):
    Project.objects.filter(pk=project.pk).update(source=source, rollback_webhook_url="")
    project.refresh_from_db()
    run = running(project)
    client.force_login(bob)
    page = client.get(PAGE).content.decode()
    assert STOP not in page and "data-stop-refused" in page and why in page
    response = client.post(f"{PAGE}stop", follow=True)
    assert response.status_code == 200 and why in response.content.decode()
    assert queued == [] and not AuditEvent.objects.filter(verb="run.stop_requested").exists()
    # The task asks the same table: a stop queued earlier is recorded as not sent, with the reason.
    tasks.stop_run(run.pk)
    failed = AuditEvent.objects.get(verb="run.stop_failed")
    assert failed.detail["detail"].startswith("not sent: ") and why in failed.detail["detail"]
