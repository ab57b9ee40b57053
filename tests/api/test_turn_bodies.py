"""Prompt and response bodies on agent turns (issue 33, walkthrough P2-11): sent over REST, stored capped
apart from the turn only when the project captures them, shown escaped in the turn detail, left out of
exports unless asked, deleted on request (audited), and carried through the run's deletion."""

from __future__ import annotations

import csv
import io
import json

import pytest

from smrweb.tracking import services
from smrweb.tracking.models import AgentTurn, AuditEvent, Project, Run, TurnBody
from tests.api.helpers import assert_json_error

EVENTS = "/api/v1/projects/hill/runs/{run}/events"
TURNS = "/api/v1/projects/hill/runs/{run}/turns"
XSS = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'


def post(api, events: list, run: str = "r1"):
    return api.generic("POST", EVENTS.format(run=run), json.dumps(events), content_type="application/json")


def streamed(response) -> str:
    assert response.status_code == 200
    return b"".join(response.streaming_content).decode()


def turn(n: int = 1, **extra) -> dict:
    return {"type": "agent.turn", "id": f"t{n}", "turn": n, "tokens_in": 10, "tokens_out": 2, **extra}


@pytest.fixture
def capturing(project, alice):
    services.update_project(project, by=alice, capture_turn_bodies=True)
    return project


def test_capture_is_off_by_default_and_nothing_is_stored_but_the_turn(api, project):
    assert Project.objects.get(pk=project.pk).capture_turn_bodies is False
    response = post(api, [turn(1, prompt="secret prompt", response="secret answer"), turn(2)])
    assert response.status_code == 200
    # Said in the answer, so the client knows its bodies went nowhere.
    assert response.json() == {"run": "r1", "accepted": 2, "duplicates": 0, "bodies_dropped": 1}
    assert AgentTurn.objects.count() == 2
    assert not TurnBody.objects.exists()


def test_a_stale_project_object_cannot_store_bodies_once_capture_is_off(project, alice):
    """A poller holds a Project read minutes ago, when capture was on; an admin has turned it off since:
    the write path reads the setting as committed, so nothing is stored."""
    from smrweb.tracking.events import parse_events

    services.update_project(project, by=alice, capture_turn_bodies=True)
    stale = Project.objects.get(pk=project.pk)
    services.update_project(Project.objects.get(pk=project.pk), by=alice, capture_turn_bodies=False)
    assert stale.capture_turn_bodies is True
    result = services.ingest_events(
        stale, "r1", parse_events(json.dumps([turn(1, prompt="p", response="r")]))
    )
    assert (result.accepted, result.bodies_dropped) == (1, 1)
    assert not TurnBody.objects.exists()


def test_text_and_chat_bodies_are_stored_apart_from_the_turn(api, capturing):
    chat = [
        {"role": "system", "content": "You improve optimizer.py."},
        {"role": "user", "content": [{"type": "text", "text": "Score was 3.41."}, {"type": "image_url"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "name": "edit"}]},
    ]
    response = post(api, [turn(1, prompt=chat, response="Lowered lr."), turn(2, response="only a reply")])
    assert response.json() == {"run": "r1", "accepted": 2, "duplicates": 0}
    first = TurnBody.objects.get(turn__event_id="t1")
    assert first.prompt == (
        "[system]\nYou improve optimizer.py.\n\n"
        '[user]\nScore was 3.41.\n{"type": "image_url"}\n\n'
        '[assistant]\ntool_calls: [{"id": "c1", "name": "edit"}]'
    )
    assert (first.response, first.response_bytes, first.response_cut) == ("Lowered lr.", 11, 0)
    assert first.prompt_bytes == len(first.prompt.encode()) and first.run_id == first.turn.run_id
    second = TurnBody.objects.get(turn__event_id="t2")
    assert (second.prompt, second.prompt_bytes, second.response) == ("", 0, "only a reply")
    # A replay stores nothing twice.
    assert post(api, [turn(1, prompt="other", response="other")]).json()["duplicates"] == 1
    assert TurnBody.objects.count() == 2


def test_a_body_over_the_cap_is_stored_cut_with_a_marker_never_refused(api, capturing, settings):
    settings.SMRWEB_TURN_BODY_MAX_BYTES = 10
    # "é" is two bytes: the cut at byte 10 falls inside the sixth one, which is dropped whole.
    response = post(api, [turn(1, prompt="ab" + "é" * 20, response="short")])
    assert response.status_code == 200 and response.json()["accepted"] == 1
    body = TurnBody.objects.get()
    assert body.prompt == "ab" + "é" * 4 + "\n… [32 bytes cut]"
    assert (body.prompt_bytes, body.prompt_cut) == (42, 32)
    assert (body.response, body.response_cut) == ("short", 0)


def test_the_default_cap_is_64_kib_and_a_megabyte_prompt_is_accepted(api, capturing):
    post(api, [turn(1, prompt="x" * 1_000_000)])
    body = TurnBody.objects.get()
    assert (body.prompt_bytes, body.prompt_cut) == (1_000_000, 1_000_000 - 65536)
    assert body.prompt.startswith("x" * 65536) and body.prompt.endswith("[934,464 bytes cut]")


@pytest.mark.parametrize(
    "prompt, field",
    [
        (5, "prompt"),
        ([{"content": "no role"}], "prompt.0.role"),
        ([{"role": "user", "content": "nul \u0000"}], "prompt"),
        ({"role": "user"}, "prompt"),
    ],
)
def test_a_malformed_body_is_a_400_naming_its_field_and_writes_nothing(api, capturing, prompt, field):
    response = post(api, [turn(1, prompt=prompt)])
    assert_json_error(response, 400)
    assert field in {e["field"] for e in response.json()["errors"]}
    assert not Run.objects.exists() and not TurnBody.objects.exists()


def test_the_turn_detail_shows_bodies_collapsed_and_escaped(api, capturing, client_alice):
    post(api, [turn(1, prompt=XSS, response="fine\n<b>not bold</b>")])
    t = AgentTurn.objects.get()
    page = client_alice.get(f"/projects/hill/runs/r1/turns/{t.pk}/").content.decode()
    assert "<script>window.pwned" not in page and "<img src=x" not in page and "<b>not bold" not in page
    assert "&lt;script&gt;window.pwned = 1&lt;/script&gt;&lt;img src=x onerror=&quot;window.pwned" in page
    assert '<details class="turn-body" data-body="prompt">' in page  # collapsed: no "open"
    assert 'Prompt <span class="muted">71\xa0bytes' in page
    assert "&lt;b&gt;not bold&lt;/b&gt;" in page


def test_the_turn_detail_says_why_there_is_no_body(api, project, alice, client_alice):
    post(api, [turn(1, prompt="dropped")])
    t = AgentTurn.objects.get()
    page = " ".join(client_alice.get(f"/projects/hill/runs/r1/turns/{t.pk}/").content.decode().split())
    assert "Prompt and response bodies are not captured in this project" in page
    services.update_project(project, by=alice, capture_turn_bodies=True)
    page = client_alice.get(f"/projects/hill/runs/r1/turns/{t.pk}/").content.decode()
    assert "The source sent no prompt or response with this turn." in page


def test_a_bar_lists_body_sizes_and_a_way_to_open_the_turn_not_the_text(api, capturing, client_alice):
    post(api, [turn(1, prompt="the prompt text", response="the answer", ts="2026-01-01T00:00:10Z")])
    t = AgentTurn.objects.get()
    page = client_alice.get(
        "/projects/hill/runs/r1/turns/?origin=2026-01-01T00:00:00Z&width_us=60000000&bin=0&kind=d"
    ).content.decode()
    page = " ".join(page.split())
    assert "Prompt 15 bytes · response 10 bytes" in page
    assert f"/projects/hill/runs/r1/turns/{t.pk}/" in page and "Open turn #1" in page
    assert "the prompt text" not in page


def test_exports_leave_bodies_out_unless_asked(api, capturing):
    post(api, [turn(1, prompt="=HYPERLINK(1)", response="answer"), turn(2)])
    url = TURNS.format(run="r1")
    plain = api.get(url).json()["results"]
    assert "prompt" not in plain[0] and "response" not in plain[0]
    header = next(csv.reader(io.StringIO(streamed(api.get(url + "?format=csv")))))
    assert "prompt" not in header and "response" not in header
    assert all(
        "prompt" not in json.loads(line) for line in streamed(api.get(url + "?format=jsonl")).splitlines()
    )

    asked = api.get(url + "?bodies=1").json()["results"]
    assert (asked[0]["prompt"], asked[0]["response"], asked[0]["prompt_bytes"]) == (
        "=HYPERLINK(1)",
        "answer",
        13,
    )
    assert (asked[1]["prompt"], asked[1]["response"], asked[1]["prompt_bytes"]) == (None, None, None)
    rows = list(csv.DictReader(io.StringIO(streamed(api.get(url + "?format=csv&bodies=1")))))
    assert rows[0]["prompt"] == "'=HYPERLINK(1)" and rows[0]["response"] == "answer"  # formula-guarded
    lines = streamed(api.get(url + "?format=jsonl&bodies=1")).splitlines()
    assert json.loads(lines[0])["response"] == "answer"
    assert_json_error(api.get(url + "?bodies=yes"), 400)


def test_turning_capture_off_keeps_stored_bodies_and_deleting_them_is_confirmed_and_audited(
    api, capturing, client_alice
):
    post(api, [turn(1, prompt="p1"), turn(2, response="r2")])
    page = " ".join(client_alice.get("/projects/hill/settings/").content.decode().split())
    assert "<b>On:</b>" in page and "the prompt or response of <b>2</b> turns" in page

    client_alice.post("/projects/hill/settings/", {"action": "turn_bodies"})  # unchecked: off
    assert Project.objects.get(pk=capturing.pk).capture_turn_bodies is False
    assert TurnBody.objects.count() == 2
    page = " ".join(client_alice.get("/projects/hill/settings/").content.decode().split())
    assert "<b>Off:</b> no prompt or response is stored" in page
    assert AuditEvent.objects.filter(
        verb="project.settings_changed", detail__capture_turn_bodies="False"
    ).exists()

    client_alice.post("/projects/hill/settings/", {"action": "delete_turn_bodies", "confirm": "wrong"})
    assert TurnBody.objects.count() == 2
    client_alice.post("/projects/hill/settings/", {"action": "delete_turn_bodies", "confirm": "hill"})
    assert not TurnBody.objects.exists() and AgentTurn.objects.count() == 2
    event = AuditEvent.objects.get(verb="project.turn_bodies_deleted")
    assert event.detail["turns"] == 2


def test_a_reviewer_cannot_change_capture_or_delete_bodies(api, capturing, client, bob):
    post(api, [turn(1, prompt="p1")])
    client.force_login(bob)
    assert (
        client.post(
            "/projects/hill/settings/", {"action": "delete_turn_bodies", "confirm": "hill"}
        ).status_code
        == 403
    )
    assert TurnBody.objects.count() == 1


def test_deleting_a_run_or_its_turns_takes_their_bodies(api, capturing, alice):
    post(api, [turn(1, prompt="p1"), turn(2, prompt="p2")])
    post(api, [turn(1, prompt="p3"), {"type": "state", "state": "done"}], run="r2")
    services.delete_event_rows(AgentTurn.objects.filter(event_id="t2", run__external_id="r1"))
    assert sorted(TurnBody.objects.values_list("prompt", flat=True)) == ["p1", "p3"]
    post(api, [{"type": "state", "state": "done"}])
    services.delete_run(Run.objects.get(external_id="r1"), by=alice, confirm="r1")
    assert list(TurnBody.objects.values_list("prompt", flat=True)) == ["p3"]
