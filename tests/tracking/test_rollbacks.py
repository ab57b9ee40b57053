"""Who may roll back what has one home (`services.capabilities.refusal` / `may`): the run,
project and submission pages show rollback buttons exactly when the domain accepts the rollback. The
structure review found the run page hiding the button of git projects though the domain and the docs
allowed it; these tests compare the page with the domain for every source."""

from __future__ import annotations

import json

import pytest
from django.db import transaction

from smrweb.tracking import services
from smrweb.tracking.errors import NotAllowed, RollbackRefused
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import Checkpoint, Project, Rollback, SourceKind, Submission
from smrweb.tracking.services import rollbacks
from smrweb.tracking.services.capabilities import Action, effect, may, refusal

CASES = [
    (SourceKind.PUSH, ""),
    (SourceKind.PUSH, "https://harness.example.org/rollback"),
    (SourceKind.SMR, ""),
    (SourceKind.GIT, ""),
]


def _run_with_a_checkpoint(project: Project) -> None:
    events = [
        {"type": "state", "state": "running"},
        {"type": "checkpoint", "id": "c1", "label": "first", "restorable": True},
        {"type": "score", "score": 0.5},
    ]
    services.ingest_events(project, "r1", parse_events(json.dumps(events)))


def _domain_accepts(project: Project, user) -> bool:
    try:
        with transaction.atomic():
            rollbacks.request_rollback(by=user, reason="probe", checkpoint=Checkpoint.objects.get())
            raise _Undo
    except _Undo:
        return True
    except (RollbackRefused, NotAllowed):
        return False


class _Undo(Exception):
    """Rolls the probe's transaction back: asking must not leave a rollback behind."""


@pytest.mark.django_db
@pytest.mark.parametrize(("source", "webhook"), CASES)
@pytest.mark.parametrize("who", ["alice", "bob", "victor"])
def test_the_pages_offer_a_rollback_exactly_when_the_domain_accepts_one(
    client, project, source, webhook, who, request
):
    Project.objects.filter(pk=project.pk).update(source=source, rollback_webhook_url=webhook)
    project.refresh_from_db()
    _run_with_a_checkpoint(project)
    user = request.getfixturevalue(who)
    accepts = _domain_accepts(project, user)
    assert may(user, project, Action.ROLL_BACK) is accepts
    assert Rollback.objects.count() == 0
    client.force_login(user)
    sub = Submission.objects.get()
    pages = [f"/projects/{project.slug}/runs/r1/", f"/projects/{project.slug}/submissions/{sub.pk}/"]
    for page in pages:
        html = client.get(page).content.decode()
        assert ("rollback-form" in html) is accepts, (page, source, webhook, who)


@pytest.mark.django_db
def test_a_git_project_offers_rollback_to_its_reviewers(project, bob, victor):
    Project.objects.filter(pk=project.pk).update(source=SourceKind.GIT)
    project.refresh_from_db()
    assert refusal(project, Action.ROLL_BACK) == ""
    assert may(bob, project, Action.ROLL_BACK) and not may(victor, project, Action.ROLL_BACK)


@pytest.mark.django_db
def test_a_push_project_without_a_webhook_says_how_to_get_one(project, bob):
    assert "harness webhook URL" in refusal(project, Action.ROLL_BACK)
    _run_with_a_checkpoint(project)
    with pytest.raises(RollbackRefused, match="harness webhook URL"):
        rollbacks.request_rollback(by=bob, reason="x", checkpoint=Checkpoint.objects.get())


@pytest.mark.django_db
@pytest.mark.parametrize("source", [SourceKind.SMR, SourceKind.GIT, SourceKind.PUSH])
def test_the_confirmation_names_what_the_source_does(client, project, bob, source):
    Project.objects.filter(pk=project.pk).update(
        source=source, rollback_webhook_url="https://harness.example.org/rb"
    )
    project.refresh_from_db()
    _run_with_a_checkpoint(project)
    client.force_login(bob)
    html = client.get(f"/projects/{project.slug}/runs/r1/").content.decode()
    assert effect(source, Action.ROLL_BACK).replace("'", "&#x27;") in html
