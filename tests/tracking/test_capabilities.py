"""What each source can do has one table (`services.capabilities`) and one refusal: every (source, action)
has a row, an archived project refuses every action first, and nothing else in the code keeps a copy. The
archived project that still offered "Start the next run" (and recorded the launch) is refused on every
way in: the domain, the pages, the form and the API."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import AuditEvent, Project, Run, RunLaunch, SourceKind
from smrweb.tracking.services import capabilities, launches
from smrweb.tracking.services.capabilities import TABLE, Action, Can, Cannot

pytestmark = pytest.mark.django_db

KEY = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
ROOT = Path(capabilities.__file__).resolve().parents[2]


def test_every_source_and_action_has_one_row():
    assert set(TABLE) == {(kind, action) for kind in SourceKind for action in Action}
    assert len(TABLE) == len(SourceKind) * len(Action)
    for cell in TABLE.values():
        assert isinstance(cell, Can | Cannot)
        assert cell.effect if isinstance(cell, Can) else True


@pytest.mark.parametrize("action", list(Action))
@pytest.mark.parametrize("source", list(SourceKind))
def test_every_refusal_covers_an_archived_project_first(project, alice, source, action):
    # Otherwise able: a webhook for push, a repository and branch for git, a silent live run.
    Project.objects.filter(pk=project.pk).update(
        source=source, rollback_webhook_url="https://hooks.example/hill", git_repo_path="/r", git_branch="b"
    )
    project.refresh_from_db()
    services.ingest_events(project, "r1", parse_events(b'[{"type": "state", "state": "running"}]'))
    run = Run.objects.get()
    services.archive_project(project, by=alice)
    project.refresh_from_db()
    said = capabilities.refusal(project, action, run=run)
    assert said.startswith("Project hill is archived"), (source, action, said)
    assert not capabilities.may(alice, project, action, run=run)


def test_no_second_copy_of_the_table_or_a_refusal_per_action():
    """A per-action effects dict or `*_refusal` function outside capabilities is a second rule."""
    copy = re.compile(
        r"^(?:(?:ROLLBACK|STEER|LAUNCH|STOP|CLOSE)_EFFECTS\s*=|CLOSABLE_SOURCES\s*=|"
        r"def (?:rollback|steer|launch|stop|close)_refusal\()",
        re.M,
    )
    found = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "smrweb").rglob("*.py")
        if path.name != "capabilities.py" and copy.search(path.read_text())
    ]
    assert found == []


# --- the archived launch ------------------------------------------------------------------------------


@pytest.fixture
def archived(project, alice):
    """A push project that could start runs (a webhook, a finished run), then archived."""
    services.update_project(project, rollback_webhook_url="https://hooks.example/hill")
    services.ingest_events(project, "r1", parse_events(b'[{"type": "state", "state": "done"}]'))
    assert capabilities.refusal(project, Action.LAUNCH) == ""
    services.archive_project(project, by=alice)
    project.refresh_from_db()
    return project


def _nothing_recorded(queued_launches) -> None:
    assert not RunLaunch.objects.exists() and queued_launches == []
    assert not AuditEvent.objects.filter(verb="launch.requested").exists()


def test_an_archived_project_refuses_a_launch_in_the_domain(archived, bob, queued_launches):
    with pytest.raises(launches.LaunchRefused, match="archived"):
        launches.request_launch(archived, by=bob, kickoff="go on", idempotency_key=KEY)
    _nothing_recorded(queued_launches)


def test_an_archived_project_offers_no_start_and_its_form_refuses(client, archived, bob, queued_launches):
    client.force_login(bob)
    for url in ("/projects/hill/", "/projects/hill/runs/r1/", "/projects/hill/knowledge/"):
        page = client.get(url).content.decode()
        assert "data-launch-link" not in page and "Start the next run" not in page, url
    form = client.get("/projects/hill/launches/new?from=r1").content.decode()
    assert "is archived" in form and "disabled" in form
    response = client.post(
        "/projects/hill/launches/new", {"idempotency_key": KEY, "from_run": "r1", "text": "go"}
    )
    assert response.status_code == 400 and "is archived" in response.content.decode()
    _nothing_recorded(queued_launches)


def test_an_archived_project_refuses_a_launch_through_the_api(archived, bob, queued_launches):
    api = APIClient()
    api.force_authenticate(bob)
    response = api.post(
        "/api/v1/projects/hill/launches",
        data=json.dumps({"from_run": "r1", "text": "go"}),
        content_type="application/json",
        headers={"Idempotency-Key": KEY},
    )
    assert response.status_code == 409, response.content
    body = response.json()
    assert body["code"] == "launch_refused" and "is archived" in body["message"]
    _nothing_recorded(queued_launches)
