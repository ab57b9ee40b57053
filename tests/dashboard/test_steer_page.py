"""The run page's Steer card: outside the live part, its status part one of the page's live cards (the
page's one poll keeps it current); the message form (htmx: the card back, the typed text kept on an error;
without JavaScript: back to the page with a message), Pause / Resume, and the run's requests with their
status and the source's answers."""

from __future__ import annotations

import json
import re

import pytest

from smrweb.dashboard import live as live_cards
from smrweb.tracking import events as ev
from smrweb.tracking import services
from smrweb.tracking.models import Project, RunControl
from smrweb.tracking.services import dispatched
from smrweb.tracking.services.control import MESSAGE_MAX

pytestmark = pytest.mark.django_db

PAGE = "/projects/hill/runs/r1/"
STEER = "/projects/hill/runs/r1/steer"
STATUS = "/projects/hill/runs/r1/steer/status"
HX = {"HX-Request": "true"}


def ingest(project, *events):
    services.ingest_events(project, "r1", ev.parse_events(json.dumps(list(events))))


@pytest.fixture
def live(project, monkeypatch):
    from smrweb import tasks

    Project.objects.filter(pk=project.pk).update(rollback_webhook_url="https://harness.example/hook")
    project.refresh_from_db()
    ingest(project, {"type": "state", "state": "running"})
    monkeypatch.setattr(tasks.dispatch_control, "delay_on_commit", lambda pk: None)
    return project


def test_the_card_sits_outside_the_live_part_and_its_status_is_one_of_the_pages_live_cards(client, bob, live):
    client.force_login(bob)
    html = client.get(PAGE).content.decode()
    polled, rest = html.split('id="run-steer"')
    assert 'id="run-live"' in polled  # the page's poll swaps cards of #run-live: the textarea is never in one
    assert '<textarea name="body" id="id_steer_body"' in rest and f'maxlength="{MESSAGE_MAX}"' in rest
    status = rest.split('id="steer-status"')[1].split("</div>\n      </div>")[0]
    # The page's one poll keeps the status current: it does not poll itself, it shows its version.
    assert "hx-trigger" not in status.split(">")[0] and 'data-card="steer-status"' in status
    cards = dict(re.findall(r'data-card="([^"]+)"\s+data-version="([^"]*)"', html))
    poll = {**HX, live_cards.CARDS_HEADER: live_cards.cards_header(cards)}
    assert client.get(PAGE, headers=poll).status_code == 204
    # A request changes the status (and only it): the poll brings it, and never the card's form.
    client.post(STEER, {"action": "pause"}, headers=HX)
    answer = client.get(PAGE, headers=poll).content.decode()
    assert 'id="steer-status"' in answer and "Pausing…" in answer and 'id="run-steer"' not in answer


def test_sending_a_message_with_htmx_answers_the_card_with_the_request(client, bob, live):
    client.force_login(bob)
    answer = client.post(STEER, {"action": "message", "body": "Try cosine decay."}, headers=HX)
    html = answer.content.decode()
    assert answer.status_code == 200 and html.lstrip().startswith('<section class="card" id="run-steer">')
    control = RunControl.objects.get()
    assert f'data-control="{control.pk}"' in html and 'data-control-status="requested"' in html
    assert "Try cosine decay." in html and "The message is on its way to the run&#x27;s source." in html
    assert '<textarea name="body" id="id_steer_body" rows="3" maxlength="10000" required\n' in html
    assert "></textarea>" in html  # cleared for the next one


def test_an_empty_message_keeps_the_form_with_the_reason(client, bob, live):
    client.force_login(bob)
    html = client.post(STEER, {"action": "message", "body": "   "}, headers=HX).content.decode()
    assert 'aria-invalid="true"' in html and "Write the message to send (1 to 10,000 characters)." in html
    assert not RunControl.objects.exists()


def test_a_refused_message_keeps_what_was_typed(client, bob, live):
    client.force_login(bob)
    typed = "keep <me> " + "x" * MESSAGE_MAX
    html = client.post(STEER, {"action": "message", "body": typed}, headers=HX).content.decode()
    assert "characters long; at most 10,000 are sent." in html
    assert "keep &lt;me&gt; xxx" in html and not RunControl.objects.exists()
    ingest(live, {"type": "state", "state": "done"})  # the run ended meanwhile: no form, the reason
    html = client.post(STEER, {"action": "message", "body": "late"}, headers=HX).content.decode()
    assert "The run is done: only a live run can be steered." in html and "textarea" not in html


def test_without_javascript_a_post_comes_back_to_the_page_with_a_message(client, bob, live):
    client.force_login(bob)
    answer = client.post(STEER, {"action": "pause"})
    assert answer.status_code == 302 and answer["Location"] == "/projects/hill/runs/r1/#run-steer"
    page = client.get(answer["Location"]).content.decode()
    assert "The pause is on its way to the run&#x27;s source." in page
    assert 'data-steer-pending="pause"' in page and "Pausing…" in page
    page = client.post(STEER, {"action": "resume"}, follow=True).content.decode()
    assert "A pause of this run is on its way (requested); resume once the run reports paused." in page


def test_pause_answers_the_status_part_and_resume_shows_once_paused(client, alice, live):
    client.force_login(alice)
    html = client.post(STEER, {"action": "pause"}, headers=HX).content.decode()
    assert html.lstrip().startswith('<div id="steer-status"') and "textarea" not in html
    pause = RunControl.objects.get()
    dispatched.start_attempt(RunControl, pause.pk)
    services.control_accepted(pause.pk, detail="attempt 1: the webhook answered HTTP 202")
    ingest(live, {"type": "state", "id": "p", "state": "paused"})
    html = client.get(STATUS, headers=HX).content.decode()
    assert 'data-steer="resume"' in html and 'data-control-status="confirmed"' in html
    assert "the webhook answered HTTP 202" in html and "the run reported paused" in html


def test_the_status_poll_answers_204_when_nothing_changed_and_stops_once_the_run_ended(client, bob, live):
    client.force_login(bob)
    first = client.get(STATUS, headers=HX)
    version = first.content.decode().split('"X-Smrweb-Version": "')[1].split('"')[0]
    assert client.get(STATUS, headers={**HX, "X-Smrweb-Version": version}).status_code == 204
    services.request_control(live.runs.get(), by=bob, kind="message", body="hi")  # bumps the run
    assert client.get(STATUS, headers={**HX, "X-Smrweb-Version": version}).status_code == 200
    RunControl.objects.update(status="confirmed")
    ingest(live, {"type": "state", "state": "done"})
    html = client.get(STATUS, headers=HX).content.decode()
    assert "hx-get" not in html.split(">")[0]  # finished and nothing pending: polling ends


def test_viewers_see_the_requests_but_no_forms_and_cannot_post(client, victor, bob, live):
    services.request_control(live.runs.get(), by=bob, kind="message", body="from bob")
    client.force_login(victor)
    html = client.get(PAGE).content.decode()
    assert "from bob" in html and "data-steer=" not in html and "id_steer_body" not in html
    assert client.post(STEER, {"action": "pause"}).status_code == 403
    assert RunControl.objects.count() == 1


def test_a_run_nobody_steered_shows_no_card_to_viewers(client, victor, live):
    client.force_login(victor)
    assert 'id="run-steer"' not in client.get(PAGE).content.decode()


def test_a_push_project_without_a_webhook_tells_reviewers_how_to_get_one(client, bob, project):
    ingest(project, {"type": "state", "state": "running"})
    client.force_login(bob)
    html = client.get(PAGE).content.decode()
    assert "data-steer-refusal" in html
    assert "an admin sets the harness webhook URL in the project settings" in html
    assert "id_steer_body" not in html


def test_the_page_stays_flat_with_many_requests(client, bob, live, django_assert_max_num_queries):
    run = live.runs.get()
    for i in range(30):
        control = services.request_control(run, by=bob, kind="message", body=f"m{i}")
        dispatched.failed(RunControl, control.pk, detail="x")
    client.force_login(bob)
    client.get(STATUS, headers=HX)
    with django_assert_max_num_queries(12):
        html = client.get(STATUS, headers=HX).content.decode()
    assert html.count("data-control=") == 10
