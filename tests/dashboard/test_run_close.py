"""Closing a silent run from the run page (a reason, a confirmation, a flash message, the notice with who
and why), and the abandoned state in every view: the run page's badge and notice, the project page's
badge, count, filter and failure line, the overview's count, compare, the knowledge page."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import AuditEvent, Run

pytestmark = pytest.mark.django_db

FORM = 'action="/projects/hill/runs/r1/close"'


def silent_run(project, run_id: str = "r1", *, ago: timedelta | None = None, state: str = "running") -> Run:
    ago = ago if ago is not None else project.stall_after + timedelta(minutes=1)
    with time_machine.travel(timezone.now() - ago, tick=False):
        services.ingest_events(
            project,
            run_id,
            parse_events(
                json.dumps(
                    [
                        {"id": "s", "type": "state", "state": state},
                        {"id": "t", "type": "agent.turn", "turn": 0, "tokens_in": 5, "tokens_out": 1},
                    ]
                )
            ),
        )
    return Run.objects.get(project=project, external_id=run_id)


def page(client, user, url: str) -> str:
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def test_reviewers_and_admins_get_the_form_on_a_silent_run(client, project, alice, bob, victor):
    silent_run(project)
    for who in (bob, alice):
        body = page(client, who, "/projects/hill/runs/r1/")
        assert FORM in body and "Close as abandoned…" in body
        form = body[body.index('<details class="close-run"') :]
        form = form[: form.index("</details>")]
        assert 'name="reason"' in form and "required" in form and 'maxlength="5000"' in form
        assert re.search(r'data-confirm="Close r1 as abandoned\?', form)
        assert "hx-preserve" in form  # the polls keep the open form and what is typed in it
    assert FORM not in page(client, victor, "/projects/hill/runs/r1/")


def test_no_form_where_closing_is_refused(client, project, bob):
    silent_run(project, "recent", ago=timedelta(seconds=30))
    silent_run(project, "done", state="done")
    for run_id in ("recent", "done"):
        assert "/close" not in page(client, bob, f"/projects/hill/runs/{run_id}/")
    smr = services.create_project("smr-page", source="smr", smr_project_id="p-page", smr_api_key="k")
    services.add_member(smr, bob, role="reviewer")
    silent_run(smr)
    assert "/close" not in page(client, bob, "/projects/smr-page/runs/r1/")


def test_closing_from_the_page_shows_who_why_and_what_happens_next(client, project, bob):
    silent_run(project)
    client.force_login(bob)
    response = client.post("/projects/hill/runs/r1/close", {"reason": "the harness was OOM-killed at 03:12"})
    assert response.status_code == 302 and response["Location"] == "/projects/hill/runs/r1/"
    body = client.get("/projects/hill/runs/r1/").content.decode()
    assert "r1 is closed as abandoned" in body  # the flash message
    notice = body[body.index("data-abandoned") :]
    notice = notice[: notice.index("</div>\n  </div>")]
    assert re.search(r"closed by <b data-closed-by>bob</b>", notice)
    assert "the harness was OOM-killed at 03:12" in notice
    assert "A state its harness reports after this" in notice
    assert 'class="badge badge-abandoned" title="Closed by bob: the harness was OOM-killed at 03:12"' in body
    assert FORM not in body  # finished: nothing more to close
    assert "data-cards-poll" not in body and 'id="run-poll"' in body  # finished: the page stops polling
    # The state changes list shows the close, with its reason.
    changes = body[body.index("<h2>State changes</h2>") :]
    assert re.search(r'badge-abandoned">abandoned</span', changes)
    assert "closed: the harness was OOM-killed at 03:12" in changes


def test_a_refused_close_says_why_and_changes_nothing(client, project, bob, victor):
    silent_run(project)
    client.force_login(bob)
    client.post("/projects/hill/runs/r1/close", {"reason": "   "})
    body = client.get("/projects/hill/runs/r1/").content.decode()
    assert "Not closed: Say why the run is abandoned" in body
    assert Run.objects.get(external_id="r1").state == "running"
    client.force_login(victor)
    assert client.post("/projects/hill/runs/r1/close", {"reason": "x"}).status_code == 403
    assert client.get("/projects/hill/runs/r1/close").status_code == 405
    assert not AuditEvent.objects.filter(verb="run.closed").exists()


@pytest.fixture
def closed(project, bob):
    services.close_run(silent_run(project, "gone"), by=bob, reason="crashed in the data loader")
    services.ingest_events(
        project, "live", parse_events(b'[{"id": "s", "type": "state", "state": "running"}]')
    )
    return Run.objects.get(external_id="gone")


def test_the_project_page_badges_counts_and_filters_abandoned_runs(client, project, alice, closed):
    body = page(client, alice, "/projects/hill/")
    assert re.search(r'<a class="count" data-count="abandoned" href="\?state=abandoned"[^>]*><b>1</b>', body)
    assert 'title="Closed by bob: crashed in the data loader">abandoned</span>' in body
    assert '<div class="cell-clip failure-line">crashed in the data loader</div>' in body
    assert '<option value="abandoned" >abandoned</option>' in body  # the state filter offers it
    filtered = page(client, alice, "/projects/hill/?state=abandoned")
    assert "/projects/hill/runs/gone/" in filtered and "/projects/hill/runs/live/" not in filtered
    assert '<option value="abandoned" selected>' in filtered
    searched = page(client, alice, "/projects/hill/?q=abandoned")
    assert "/projects/hill/runs/gone/" in searched and "/projects/hill/runs/live/" not in searched


def test_the_overview_counts_abandoned_runs(client, project, alice, closed):
    body = page(client, alice, "/")
    assert re.search(
        r'data-count="abandoned" href="/projects/hill/\?state=abandoned"[^>]*><b>1</b> abandoned', body
    )
    assert re.search(r'data-count="active"><b>1</b>', body)  # the live run; the abandoned one is not active


def test_the_overview_says_nothing_of_abandoned_runs_when_there_are_none(client, project, alice):
    silent_run(project)
    assert 'data-count="abandoned"' not in page(client, alice, "/")
    assert 'data-count="abandoned"' not in page(client, alice, "/projects/hill/")


def test_compare_and_knowledge_show_abandoned_runs(client, project, alice, closed):
    compared = page(client, alice, "/projects/hill/compare/?runs=gone&runs=live")
    assert 'class="badge badge-abandoned"' in compared
    knowledge = page(client, alice, "/projects/hill/knowledge/")
    assert 'class="badge badge-kind-run_abandoned">run abandoned</span>' in knowledge
    assert "the run was abandoned — crashed in the data loader" in knowledge
