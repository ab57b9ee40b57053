"""Read-only share links (issue 39, item 5) on the pages: the Share… control of the compare, tree, arena
history and leaderboard pages, the project's list with Revoke, and the public page `/s/<token>/` — for each
kind without signing in, with its data and without forms, htmx or action buttons; expired → 410, revoked or
unknown → 404; a token of one project never shows another's."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from smrweb.tracking import services
from smrweb.tracking.models import ArenaResult, AuditEvent, ShareKind, ShareLink, Submission, SubmissionStatus
from tests.factories import admin_project, push

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 20, tzinfo=UTC)
ACTION_WORDS = (
    "Revoke",
    "Make baseline",
    "Compare ticked runs",
    "Sign out",
    "Create read-only link",
    "Share…",
)


def score(value: float, minutes: int, sid: str) -> dict:
    return {"type": "score", "id": sid, "score": value, "ts": (T0 + timedelta(minutes=minutes)).isoformat()}


def turn(i: int, minutes: int) -> dict:
    return {
        "type": "agent.turn",
        "id": f"t{i}",
        "turn": i,
        "cost_usd": 0.5,
        "tokens_in": 10,
        "tokens_out": 5,
        "ts": (T0 + timedelta(minutes=minutes)).isoformat(),
    }


@pytest.fixture
def runs(project, alice):
    push(project, "run-alpha-1c", turn(0, 0), score(0.4, 1, "a1"), score(0.6, 5, "a2"))
    push(project, "run-beta-7d", turn(0, 0), score(0.5, 2, "b1"))
    sub = Submission.objects.get(project=project, event_id="a2")
    Submission.objects.filter(pk=sub.pk).update(status=SubmissionStatus.VERIFIED)
    services.figures.rebuild_project_figures(project.pk)
    ArenaResult.objects.create(
        submission=sub, arena="dogfight-5e", rank=3, arena_score=0.61, recorded_by=alice
    )
    return project


def create(client, project, kind, query="", expires="7", hx=False):
    headers = {"HX-Request": "true"} if hx else {}
    return client.post(
        f"/projects/{project.slug}/shares/",
        {"kind": kind, "query": query, "expires": expires},
        headers=headers,
    )


def new_url(client, project, kind, query="") -> str:
    response = create(client, project, kind, query)
    assert response.status_code == 302, response.content[:500]
    page = client.get(response["Location"]).content.decode()
    return re.search(r'data-copy="(http://testserver/s/[^"]+/)"', page)[1]


def assert_read_only(body: str) -> None:
    assert "<form" not in body
    assert "hx-" not in body
    for word in ACTION_WORDS:
        assert word not in body, word
    assert 'href="/projects/' not in body and 'href="/scenarios/' not in body
    assert "Read-only view shared by" in body


def public(url: str):
    return Client().get(url.replace("http://testserver", ""))


def test_each_kind_renders_without_sign_in_with_its_data_and_no_actions(client_alice, runs):
    for kind, query, marker in (
        (ShareKind.COMPARE, "runs=run-alpha-1c&runs=run-beta-7d&metric=score&x=usd", "run-beta-7d"),
        (ShareKind.TREE, "q=alpha", "run-alpha-1c"),
        (ShareKind.ARENA, "arena_x=spend", "dogfight-5e"),
    ):
        url = new_url(client_alice, runs, kind, query)
        response = public(url)
        body = response.content.decode()
        assert response.status_code == 200, kind
        assert marker in body, kind
        assert_read_only(body)
        assert response["X-Robots-Tag"].startswith("noindex")
        assert response["Referrer-Policy"] == "no-referrer"
        assert "no-store" in response["Cache-Control"]
        assert "Hill climb" not in body  # the project is named by its slug only
    # The tree followed its filter: the run that does not match is only context, if shown at all.
    link = ShareLink.objects.get(kind=ShareKind.TREE)
    assert link.query == "q=alpha"
    assert ShareLink.objects.get(kind=ShareKind.ARENA).query == "arena_x=spend"
    compare = ShareLink.objects.get(kind=ShareKind.COMPARE)
    assert compare.query == "runs=run-alpha-1c&runs=run-beta-7d"


def test_the_compare_link_draws_its_charts(client_alice, runs):
    body = public(
        new_url(client_alice, runs, ShareKind.COMPARE, "runs=run-alpha-1c,run-beta-7d")
    ).content.decode()
    assert 'id="compare-score-data"' in body and "vendor/plotly.min.js" in body
    assert 'id="shared-compare"' in body


def test_the_leaderboard_shows_what_its_creator_can_read_now(client_alice, alice, runs, bob):
    scenario = runs.scenario
    team = services.create_project(slug="team-b", name="Team B secret", scenario=scenario)
    services.add_member(team, alice, role="admin")
    push(team, "tb-run", score(0.9, 1, "tb1"))
    Submission.objects.filter(project=team).update(status=SubmissionStatus.VERIFIED)
    services.figures.rebuild_project_figures(team.pk)
    response = client_alice.post(f"/scenarios/{scenario.key}/share", {"kind": "leaderboard", "expires": "1"})
    assert response.status_code == 302
    page = client_alice.get(response["Location"]).content.decode()
    url = re.search(r'data-copy="(http://testserver/s/[^"]+/)"', page)[1]
    body = public(url).content.decode()
    assert "team-b" in body and "hill" in body and "tb-run" in body
    assert "Team B secret" not in body
    assert_read_only(body)
    team.memberships.filter(user=alice).delete()  # alice leaves team-b
    body = public(url).content.decode()
    assert "team-b" not in body and "hill" in body  # the creator left team-b: its row vanished


def test_expired_is_410_revoked_and_unknown_are_404_as_html(client_alice, runs, alice):
    url = new_url(client_alice, runs, ShareKind.TREE)
    with time_machine.travel(timezone.now() + timedelta(days=8)):
        response = public(url)
    assert response.status_code == 410 and b"expired" in response.content and b"<html" in response.content
    link = ShareLink.objects.get()
    response = client_alice.post(f"/shares/{link.pk}/revoke")
    assert response.status_code == 302
    response = public(url)
    assert response.status_code == 404 and b"<html" in response.content
    assert response["Referrer-Policy"] == "no-referrer"
    assert public("/s/" + "A" * 43 + "/").status_code == 404
    assert public("/s/short/").status_code == 404


def test_a_token_shows_its_own_project_only(client_alice, runs, carol):
    other = admin_project("other-x", name="Other X", by=carol)
    push(other, "other-run-9", score(0.1, 1, "o1"))
    url = new_url(client_alice, runs, ShareKind.TREE)
    body = public(url).content.decode()
    assert "run-alpha-1c" in body and "other-run-9" not in body
    # A comparison naming another project's run (project:run) keeps this project's runs only.
    response = create(
        client_alice, runs, ShareKind.COMPARE, "runs=run-alpha-1c&runs=run-beta-7d&runs=other-x:other-run-9"
    )
    assert response.status_code == 302
    assert ShareLink.objects.get(kind=ShareKind.COMPARE).query == "runs=run-alpha-1c&runs=run-beta-7d"


@pytest.mark.parametrize(
    "data",
    [
        {"kind": "compare", "query": "runs=only-one", "expires": "7"},
        {"kind": "compare", "query": "", "expires": "7"},
        {"kind": "tree", "query": "", "expires": "365"},
        {"kind": "tree", "query": "", "expires": "abc"},
        {"kind": "nonsense", "query": "", "expires": "7"},
        {"kind": "leaderboard", "query": "", "expires": "7"},
        {"kind": "tree", "query": "state=frobbed", "expires": "7"},
        {"kind": "tree", "query": "x" * 5000, "expires": "7"},
        {},
    ],
)
def test_bad_input_is_a_form_error_not_a_500(client_alice, runs, data):
    response = client_alice.post("/projects/hill/shares/", data)
    assert response.status_code == 400
    assert b"data-share-error" in response.content
    response = client_alice.post("/projects/hill/shares/", data, headers={"HX-Request": "true"})
    assert (
        response.status_code == 200
        and b"data-share-error" in response.content
        and b"<html" not in response.content
    )
    assert not ShareLink.objects.exists()


def test_the_scenario_form_refuses_bad_input_with_a_page(client_alice, runs):
    response = client_alice.post(
        f"/scenarios/{runs.scenario.key}/share", {"kind": "leaderboard", "expires": "0"}
    )
    assert response.status_code == 400 and b"data-share-error" in response.content


def test_htmx_create_answers_the_url_once_in_place(client_alice, runs):
    response = create(client_alice, runs, ShareKind.TREE, hx=True)
    body = response.content.decode()
    assert response.status_code == 200 and "<html" not in body
    url = re.search(r'data-copy="(http://testserver/s/[^"]+/)"', body)[1]
    assert public(url).status_code == 200
    # Not kept anywhere: the list shows the link without its URL.
    listing = client_alice.get("/projects/hill/shares/").content.decode()
    assert url not in listing and 'data-share="' in listing


def test_the_pages_offer_the_control_to_reviewers_only(client, runs, bob, victor):
    pages = [
        "/projects/hill/compare/?runs=run-alpha-1c&runs=run-beta-7d",
        "/projects/hill/tree/",
        "/projects/hill/knowledge/",
        f"/scenarios/{runs.scenario.key}/",
    ]
    client.force_login(bob)
    for page in pages:
        assert "Create read-only link" in client.get(page).content.decode(), page
    client.force_login(victor)
    for page in pages[:3]:
        assert "Create read-only link" not in client.get(page).content.decode(), page
    assert client.post("/projects/hill/shares/", {"kind": "tree", "expires": "7"}).status_code == 403


def test_the_list_shows_every_link_and_revoke_for_who_may(client, runs, alice, bob, victor):
    services.create_share_link(by=alice, kind=ShareKind.TREE, days=1, project=runs)
    mine, _ = services.create_share_link(by=bob, kind=ShareKind.ARENA, days=7, project=runs)
    client.force_login(victor)
    body = client.get("/projects/hill/shares/").content.decode()
    assert body.count('data-share="') == 2 and "Revoke</button>" not in body
    client.force_login(bob)
    body = client.get("/projects/hill/shares/").content.decode()
    assert body.count("Revoke</button>") == 1  # his own
    theirs = ShareLink.objects.exclude(pk=mine.pk).get()
    assert client.post(f"/shares/{theirs.pk}/revoke").status_code == 403
    assert client.post(f"/shares/{mine.pk}/revoke").status_code == 302
    assert AuditEvent.objects.filter(verb="share_link.revoked").count() == 1
    client.force_login(alice)
    body = client.get("/projects/hill/shares/").content.decode()
    assert body.count("Revoke</button>") == 1 and 'data-state="revoked"' in body


def test_outsiders_learn_nothing_of_a_link(client, runs, alice, carol):
    link, _ = services.create_share_link(by=alice, kind=ShareKind.TREE, days=1, project=runs)
    client.force_login(carol)
    assert client.post(f"/shares/{link.pk}/revoke").status_code == 404
    assert client.get("/projects/hill/shares/").status_code == 404
    assert client.post(f"/shares/{link.pk + 99}/revoke").status_code == 404
    assert ShareLink.objects.get().revoked_at is None
