"""The knowledge page and the entry edit page: roles (outsider 404, viewer read-only, reviewer/admin
write), the copyable carry-forward block and its n selector, form errors in the form (400), escaping."""

from __future__ import annotations

import html
import json
import re

import pytest

from smrweb.tracking import queries, services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import AuditEvent, KnowledgeEntry, KnowledgeKind, Submission, VerificationOutcome
from smrweb.tracking.services import knowledge
from smrweb.tracking.services import submissions as lifecycle

pytestmark = pytest.mark.django_db
PAGE = "/projects/hill/knowledge/"
FAILED = KnowledgeKind.FAILED_APPROACH
HOSTILE = '<script>alert("x")</script>"><img src=x onerror=alert(1)>'


def edit_url(entry) -> str:
    return f"/projects/hill/knowledge/{entry.pk}/edit"


def scored(project, value=0.5, run="r1") -> Submission:
    services.ingest_events(project, run, parse_events(json.dumps([{"type": "score", "score": value}])))
    return Submission.objects.filter(project=project).order_by("-id").first()


def as_user(client, user):
    client.force_login(user)
    return client


def copy_text(body: str) -> str:
    """The Copy button's data-copy attribute, unescaped as the browser would."""
    match = re.search(r'data-copy="([^"]*)" data-copy-label="carry-forward block"', body)
    assert match, "no copy button"
    return html.unescape(match.group(1))


@pytest.fixture
def entry(project, bob):
    return knowledge.add_entry(
        project, by=bob, kind=FAILED, title="Pure random search", body="Plateaued at 0.4."
    )


# --- roles ------------------------------------------------------------------------------------------


def test_outsiders_get_404_everywhere(client, carol, entry):
    as_user(client, carol)
    assert client.get(PAGE).status_code == 404
    assert client.post(PAGE, {"kind": "note", "title": "x"}).status_code == 404
    assert client.get(edit_url(entry)).status_code == 404
    assert client.post(edit_url(entry), {"kind": "note", "title": "x"}).status_code == 404
    assert KnowledgeEntry.objects.count() == 1


def test_anonymous_visitors_are_sent_to_sign_in(client, entry):
    response = client.get(PAGE)
    assert response.status_code == 302 and "/login" in response["Location"]


def test_viewers_read_but_see_no_form_and_no_edit_links(client, victor, entry):
    body = as_user(client, victor).get(PAGE).content.decode()
    assert "Pure random search" in body and "Plateaued at 0.4." in body
    assert 'id="add-entry"' not in body and "/edit" not in body
    assert 'data-copy-label="carry-forward block"' in body


def test_viewers_are_refused_writes_with_403(client, victor, entry):
    as_user(client, victor)
    assert client.post(PAGE, {"kind": "note", "title": "sneaky"}).status_code == 403
    assert client.get(edit_url(entry)).status_code == 403
    assert client.post(edit_url(entry), {"kind": "note", "title": "sneaky"}).status_code == 403
    entry.refresh_from_db()
    assert entry.title == "Pure random search" and KnowledgeEntry.objects.count() == 1


@pytest.mark.parametrize("username", ["alice", "bob"])
def test_reviewers_and_admins_add_an_entry_then_get_redirected(client, project, username, request):
    sub = scored(project, 0.42)
    as_user(client, request.getfixturevalue(username))
    response = client.post(
        PAGE, {"kind": FAILED, "title": "Tiny CNN", "body": "Too slow to train.", "submission": sub.pk}
    )
    entry = KnowledgeEntry.objects.get(title="Tiny CNN")
    assert response.status_code == 302 and response["Location"] == f"{PAGE}#entry-{entry.pk}"
    assert (entry.kind, entry.body, entry.submission, entry.created_by.username) == (
        FAILED,
        "Too slow to train.",
        sub,
        username,
    )
    assert AuditEvent.objects.filter(verb="knowledge.added", object_id=str(entry.pk)).exists()
    body = client.get(PAGE).content.decode()
    assert "Added “Tiny CNN”." in body
    assert f'id="entry-{entry.pk}"' in body and f'href="{edit_url(entry)}"' in body
    assert "[failed approach] Tiny CNN (score 0.42, run r1): Too slow to train." in copy_text(body)


@pytest.mark.parametrize("username", ["alice", "bob"])
def test_reviewers_and_admins_edit_an_entry(client, entry, username, request):
    as_user(client, request.getfixturevalue(username))
    form = client.get(edit_url(entry)).content.decode()
    assert 'value="Pure random search"' in form and "Plateaued at 0.4.</textarea>" in form
    assert '<option value="failed_approach" selected>' in form
    response = client.post(
        edit_url(entry), {"kind": "note", "title": "Random search (noted)", "body": "Baseline."}
    )
    assert response.status_code == 302 and response["Location"] == f"{PAGE}#entry-{entry.pk}"
    entry.refresh_from_db()
    assert (entry.kind, entry.title, entry.body) == ("note", "Random search (noted)", "Baseline.")
    assert AuditEvent.objects.get(verb="knowledge.edited").actor.username == username


def test_an_unknown_entry_or_another_projects_entry_is_404(client, alice, other_project, carol):
    theirs = knowledge.add_entry(other_project, by=carol, kind=FAILED, title="theirs")
    as_user(client, alice)
    assert client.get("/projects/hill/knowledge/999999/edit").status_code == 404
    assert client.get(edit_url(theirs)).status_code == 404


# --- form errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"kind": FAILED, "title": ""}, "This field is required."),
        ({"kind": FAILED, "title": "   "}, "This field is required."),
        ({"kind": FAILED, "title": "x" * 301}, "at most 300 characters"),
        ({"kind": "rumour", "title": "x"}, "Select a valid choice."),
        (
            {"kind": FAILED, "title": "x", "body": "y" * (knowledge.BODY_MAX + 1)},
            f"at most {knowledge.BODY_MAX}",
        ),
        ({"kind": FAILED, "title": "nul\x00"}, "Null characters are not allowed."),
        ({"kind": FAILED, "title": "x", "submission": "999999"}, "There is no submission #999999 in hill."),
        ({"kind": FAILED, "title": "x", "submission": "abc"}, "Enter a whole number."),
    ],
)
def test_bad_input_comes_back_in_the_form_with_400(client, alice, project, data, message):
    response = as_user(client, alice).post(PAGE, data)
    assert response.status_code == 400
    body = response.content.decode()
    assert 'class="form-error"' in body and html.escape(message) in body
    assert 'id="add-entry"' in body and "carry-forward block" in body  # the whole page, not an error page
    assert not KnowledgeEntry.objects.exists()


def test_another_projects_submission_is_refused_in_the_form(client, alice, project, other_project):
    theirs = scored(other_project, 0.3)
    response = as_user(client, alice).post(PAGE, {"kind": FAILED, "title": "x", "submission": theirs.pk})
    assert (
        response.status_code == 400
        and f"There is no submission #{theirs.pk} in hill." in response.content.decode()
    )


def test_a_bad_edit_comes_back_in_the_form_with_400_and_keeps_the_entry(client, alice, entry):
    response = as_user(client, alice).post(edit_url(entry), {"kind": FAILED, "title": "", "body": "kept?"})
    assert response.status_code == 400
    body = response.content.decode()
    assert "This field is required." in body and "kept?</textarea>" in body
    entry.refresh_from_db()
    assert entry.title == "Pure random search"


# --- the carry-forward block ------------------------------------------------------------------------


def test_the_block_on_the_page_is_the_copyable_text(client, victor, project, alice, bob):
    sub = lifecycle.request_verification(scored(project, 0.99), by=bob)
    lifecycle.record_verification(
        sub.pk, lifecycle.VerificationResult(VerificationOutcome.FAILED, 1, "", "exited 1")
    )
    scored(project, 0.8, run="r2")
    body = as_user(client, victor).get(PAGE).content.decode()
    text = queries.carry_forward(project).text
    assert copy_text(body) == text
    assert f'<pre class="carry-text" id="carry-text">{html.escape(text)}</pre>' in body
    assert "**Best so far:** 0.8 — run r2" in text and "[invalid]" in text


def test_the_n_selector_changes_how_many_are_carried(client, victor, project, bob):
    for i in range(6):
        knowledge.add_entry(project, by=bob, kind=FAILED, title=f"idea {i}")
    as_user(client, victor)
    assert "**Last 3 failed" in copy_text(client.get(PAGE).content.decode())
    body = client.get(PAGE + "?n=5").content.decode()
    assert "**Last 5 failed" in copy_text(body) and '<option value="5" selected>' in body
    for bad in ("abc", "0", "99"):  # a hand-typed bad n shows the default, never an error page
        response = client.get(PAGE + f"?n={bad}")
        assert response.status_code == 200 and "**Last 3 failed" in copy_text(response.content.decode())


def test_hostile_strings_are_escaped_everywhere(client, alice, project):
    as_user(client, alice)
    client.post(PAGE, {"kind": FAILED, "title": HOSTILE[:300], "body": HOSTILE})
    entry = KnowledgeEntry.objects.get()
    for url in (PAGE, edit_url(entry)):
        body = client.get(url).content.decode()
        assert "<script>alert" not in body and "<img src=x" not in body
        assert (
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"
            in body
        )
    assert HOSTILE in copy_text(client.get(PAGE).content.decode())  # copied as written, shown as text


def test_the_project_page_links_to_knowledge_and_the_review_queue(client_alice, project):
    body = client_alice.get("/projects/hill/").content.decode()
    assert f'href="{PAGE}">Knowledge</a>' in body
    assert 'href="/projects/hill/review/">Review queue</a>' in body
