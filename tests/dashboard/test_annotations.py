"""What people write on the pages: the run's name, pin and tags (title, card, project table and its tag
filter), the note (htmx editor, Markdown shown safely), comment threads on runs and submissions, @mentions
in the inbox and the bell, and `#approach` on the knowledge page. Viewers read, reviewers write."""

from __future__ import annotations

import json

import pytest

from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import AuditEvent, Comment, Notification, Run, RunNote, RunTag, Submission

pytestmark = pytest.mark.django_db

P = "/projects/hill"
R = "/projects/hill/runs/r1"
HX = {"HX-Request": "true"}


def push(project, run_id: str, *events: dict) -> Run:
    services.ingest_events(project, run_id, parse_events(json.dumps(list(events))))
    return Run.objects.get(project=project, external_id=run_id)


@pytest.fixture
def run(project):
    return push(project, "r1", {"type": "score", "score": 0.5}, {"type": "state", "state": "done"})


@pytest.fixture
def sub(run):
    return Submission.objects.get(run=run)


def login(client, user):
    client.force_login(user)
    return client


# --- name, pin, tags ----------------------------------------------------------------------------------------


def test_the_run_page_shows_the_name_the_id_the_pin_and_the_tags(client, run, bob, victor):
    services.update_run_labels(run, by=bob, display_name="Warmup sweep", pinned=True)
    services.set_tag(run, key="model", value="gpt-5", by=bob)
    services.set_tag(run, key="baseline", by=bob)
    page = login(client, victor).get(f"{R}/").content.decode()
    assert '<span class="rid-title">Warmup sweep</span>' in page
    assert '<code class="rid-sub" title="The run\'s id">r1</code>' in page and "data-pinned" in page
    assert (
        'href="/projects/hill/?tag=model%3Dgpt-5"' in page and 'href="/projects/hill/?tag=baseline"' in page
    )
    assert "<title>Warmup sweep · hill · smrweb</title>" in page
    # A viewer reads; the forms are for reviewers.
    assert 'name="display_name"' not in page and 'name="remove"' not in page and "Pin to the top" not in page
    # The poll of the title brings the tags too.
    poll = client.get(f"{R}/", headers=HX).content.decode()
    assert "<html" not in poll and "Warmup sweep" in poll and "?tag=baseline" in poll


def test_reviewers_tag_rename_and_pin_from_the_run_page(client, run, bob):
    login(client, bob)
    page = client.get(f"{R}/").content.decode()
    assert 'name="display_name"' in page and "Pin to the top" in page and 'name="tag"' in page
    answer = client.post(f"{R}/tags", {"tag": "model=gpt-5"})
    assert answer.status_code == 302 and answer["Location"] == f"{R}/#run-tags"
    client.post(f"{R}/tags", {"tag": "baseline"})
    assert sorted(str(t) for t in RunTag.objects.filter(run=run)) == ["baseline", "model=gpt-5"]
    client.post(f"{R}/tags", {"remove": "baseline"})
    client.post(f"{R}/labels", {"display_name": "Sweep"})
    client.post(f"{R}/labels", {"pinned": "1"})
    run.refresh_from_db()
    assert (run.display_name, run.pinned) == ("Sweep", True)
    assert [str(t) for t in RunTag.objects.filter(run=run)] == ["model=gpt-5"]
    page = client.get(f"{R}/").content.decode()
    assert "Unpin" in page and "is pinned" in page  # the flash says what happened
    refused = client.post(f"{R}/tags", {"tag": "bad!key"}, follow=True).content.decode()
    assert "Not tagged: A tag key is 1 to 250" in refused


def test_viewers_and_outsiders_cannot_label(client, run, victor, carol):
    login(client, victor)
    assert client.post(f"{R}/tags", {"tag": "x"}).status_code == 403
    assert client.post(f"{R}/labels", {"pinned": "1"}).status_code == 403
    login(client, carol)
    assert client.post(f"{R}/tags", {"tag": "x"}).status_code == 404
    assert not RunTag.objects.exists() and not Run.objects.get(pk=run.pk).pinned


def test_the_project_page_shows_names_pins_and_chips_and_filters_by_tag(client, project, bob, victor):
    for name in ("a", "b", "c"):
        push(project, name, {"type": "state", "state": "running"})
    runs = {r.external_id: r for r in Run.objects.filter(project=project)}
    services.update_run_labels(runs["c"], by=bob, display_name="Cosine", pinned=True)
    services.set_tag(runs["a"], key="baseline", by=bob)
    services.set_tag(runs["a"], key="model", value="gpt-5", by=bob)
    services.set_tag(runs["b"], key="model", value="o3", by=bob)
    login(client, victor)

    def rows(query: str = "", **headers) -> list[str]:
        body = client.get(f"{P}/{query}", headers=headers).content.decode()
        return [part.split('"')[0] for part in body.split('<tr data-run="')[1:]]

    assert rows()[0] == "c"  # pinned first
    page = client.get(f"{P}/").content.decode()
    assert ">Cosine</a>" in page and "<code>c</code>" in page and 'data-pinned title="Pinned' in page
    assert 'href="?tag=model%3Dgpt-5"' in page and 'href="?tag=baseline"' in page
    assert sorted(rows("?tag=model")) == ["a", "b"]
    assert rows("?tag=model%3Dgpt-5") == ["a"]
    assert rows("?tag=model&tag=baseline") == ["a"]
    assert rows("?tag=model&tag=baseline&tag=", **HX) == ["a"]  # the empty tag box adds nothing
    filtered = client.get(f"{P}/?tag=model&tag=baseline").content.decode()
    assert "data-active-tags" in filtered and 'href="?tag=baseline"' in filtered  # × on model keeps baseline
    assert '<input type="hidden" name="tag" value="model">' in filtered
    none = client.get(f"{P}/?tag=nothing").content.decode()
    assert "No runs match these filters." in none
    ignored = client.get(f"{P}/?tag=bad%21key").content.decode()
    assert "data-ignored" in ignored and len(rows("?tag=bad%21key")) == 3


def test_the_chart_follows_the_tag_filter(client, project, bob, victor):
    a = push(project, "a", {"type": "score", "score": 0.1})
    push(project, "b", {"type": "score", "score": 0.2})
    services.set_tag(a, key="baseline", by=bob)
    page = login(client, victor).get(f"{P}/?tag=baseline&tag=").content.decode()
    assert f'hx-get="{P}/chart/?tag=baseline"' in page


# --- the note -----------------------------------------------------------------------------------------------


HOSTILE_NOTE = (
    '<script>alert("x")</script> <img src=x onerror=alert(1)> **bold** [link](javascript:alert(1)) @victor'
)


def test_the_note_is_written_with_htmx_and_shown_safely(client, run, bob, victor):
    login(client, bob)
    answer = client.post(f"{R}/note", {"body": HOSTILE_NOTE}, headers=HX)
    assert answer.status_code == 200
    card = answer.content.decode()
    assert card.lstrip().startswith('<section class="card" id="run-note">') and "<html" not in card
    for text in (card, login(client, victor).get(f"{R}/").content.decode()):
        note = text.split("data-note>")[1].split("</div>")[0]
        assert (
            "<script" not in note
            and "<img" not in note
            and "onerror=" not in note.replace("onerror=alert(1)&gt;", "")
        )
        assert "&lt;script&gt;" in note and "<strong>bold</strong>" in note
        assert (
            'href="javascript' not in note and '<span class="mention" title="@victor">@victor</span>' in note
        )
    assert RunNote.objects.get(run=run).edited_by == bob
    assert AuditEvent.objects.filter(verb="run.note_edited", actor_label="bob").count() == 1


def test_a_refused_note_comes_back_with_the_error_and_the_draft(client, run, bob):
    login(client, bob)
    answer = client.post(f"{R}/note", {"body": "x" * 20_001}, headers=HX)
    assert answer.status_code == 200  # htmx swaps 200s only
    card = answer.content.decode()
    assert (
        'role="alert"' in card
        and "At most 20000 characters" in card
        and '<details class="editor" open>' in card
    )
    assert not RunNote.objects.exists()
    plain = client.post(f"{R}/note", {"body": "plain post"})
    assert plain.status_code == 302 and plain["Location"] == f"{R}/#run-note"


def test_viewers_read_the_note_but_do_not_edit_it(client, run, bob, victor, carol):
    services.save_note(run, by=bob, body="A note")
    page = login(client, victor).get(f"{R}/").content.decode()
    assert "<p>A note</p>" in page and "Edit the note" not in page
    assert client.post(f"{R}/note", {"body": "mine"}, headers=HX).status_code == 403
    assert login(client, carol).post(f"{R}/note", {"body": "mine"}).status_code == 404
    assert RunNote.objects.get().body == "A note"


# --- comments -----------------------------------------------------------------------------------------------


def test_comments_on_a_run_are_added_edited_and_deleted_on_its_page(client, run, alice, bob, victor):
    login(client, bob)
    answer = client.post(f"{R}/comments/", {"body": "First <b>look</b> @victor", "next": f"{R}/"}, headers=HX)
    assert answer.status_code == 200
    thread = answer.content.decode()
    assert f'id="comments-run-{run.pk}"' in thread and "<html" not in thread
    assert (
        "&lt;b&gt;look&lt;/b&gt;" in thread
        and '<span class="mention" title="@victor">@victor</span>' in thread
    )
    comment = Comment.objects.get()
    assert f'action="/projects/hill/comments/{comment.pk}"' in thread  # bob edits and deletes his own

    edited = client.post(
        f"/projects/hill/comments/{comment.pk}", {"action": "edit", "body": "Edited"}, headers=HX
    )
    assert "<p>Edited</p>" in edited.content.decode() and ">edited</span>" in edited.content.decode()
    # Someone else's comment: alice (an admin) may delete it, not rewrite it; victor neither.
    login(client, alice)
    assert (
        client.post(f"/projects/hill/comments/{comment.pk}", {"action": "edit", "body": "x"}).status_code
        == 403
    )
    page = client.get(f"{R}/").content.decode()
    assert "<p>Edited</p>" in page and "Delete</button>" in page and "<summary>Edit</summary>" not in page
    login(client, victor)
    assert client.post(f"/projects/hill/comments/{comment.pk}", {"action": "delete"}).status_code == 403
    page = client.get(f"{R}/").content.decode()
    assert "<p>Edited</p>" in page and "Add a comment" not in page and "Delete</button>" not in page

    login(client, alice)
    deleted = client.post(f"/projects/hill/comments/{comment.pk}", {"action": "delete", "next": f"{R}/"})
    assert deleted.status_code == 302 and deleted["Location"] == f"{R}/#comment-{comment.pk}"
    page = client.get(f"{R}/").content.decode()
    assert "data-deleted>deleted</p>" in page and "Edited" not in page


def test_a_refused_comment_keeps_its_draft(client, run, bob):
    login(client, bob)
    answer = client.post(f"{R}/comments/", {"body": "   "}, headers=HX)
    assert answer.status_code == 200 and "data-comment-error" in answer.content.decode()
    plain = client.post(f"{R}/comments/", {"body": "x" * 20_001})
    assert plain.status_code == 400 and "At most 20000 characters" in plain.content.decode()
    assert not Comment.objects.exists()


def test_the_submission_page_loads_its_comments_and_they_are_written_there(client, sub, bob, victor):
    url = f"/projects/hill/submissions/{sub.pk}/comments/"
    page = login(client, victor).get(f"/projects/hill/submissions/{sub.pk}/").content.decode()
    assert f'hx-get="{url}" hx-trigger="load"' in page and f'<a href="{url}">Show the comments</a>' in page
    login(client, bob)
    answer = client.post(url, {"body": "Check the **seed** @victor"}, headers=HX)
    assert answer.status_code == 200 and f'id="comments-sub-{sub.pk}"' in answer.content.decode()
    fragment = login(client, victor).get(url, headers=HX).content.decode()
    assert "<html" not in fragment and "<strong>seed</strong>" in fragment and "Add a comment" not in fragment
    full = client.get(url).content.decode()
    assert "<html" in full and f"Comments on submission #{sub.pk}" in full and "<strong>seed</strong>" in full
    # Without htmx a post comes back to the page it was made on.
    login(client, bob)
    plain = client.post(url, {"body": "again", "next": url})
    assert plain.status_code == 302 and plain["Location"].startswith(f"{url}#comment-")
    assert client.post(url, {"body": "x", "next": "https://evil.example/"})["Location"].startswith(url)
    assert Comment.objects.filter(submission=sub).count() == 3


def test_viewers_and_outsiders_cannot_comment(client, sub, run, victor, carol):
    url = f"/projects/hill/submissions/{sub.pk}/comments/"
    login(client, victor)
    assert client.post(url, {"body": "x"}).status_code == 403
    assert client.post(f"{R}/comments/", {"body": "x"}).status_code == 403
    login(client, carol)
    assert client.get(url).status_code == 404 and client.post(url, {"body": "x"}).status_code == 404
    assert not Comment.objects.exists()


# --- mentions in the inbox ----------------------------------------------------------------------------------


def test_a_mention_lands_in_the_inbox_and_the_bell_once(client, run, bob, victor, carol):
    login(client, bob)
    client.post(f"{R}/comments/", {"body": "@victor and @carol, see"}, headers=HX)
    comment = Comment.objects.get()
    client.post(f"/projects/hill/comments/{comment.pk}", {"action": "edit", "body": "@victor, see (edited)"})
    inbox = login(client, victor).get("/inbox/").content.decode()
    assert (
        "bob mentioned you on run r1 (Hill climb)" in inbox and "data-mention>Hill climb · mention" in inbox
    )
    assert f'href="/projects/hill/runs/r1/#comment-{comment.pk}"' in inbox
    assert 'data-unread="1"' in inbox  # the bell
    assert inbox.count("data-notification=") == 1
    mention = Notification.objects.get(recipient=victor)
    client.post("/inbox/read", {"id": str(mention.pk)})
    assert Notification.objects.get(pk=mention.pk).read_at is not None
    assert "data-notification=" not in login(client, carol).get("/inbox/").content.decode()


# --- #approach on the knowledge page ------------------------------------------------------------------------


def test_approaches_show_on_the_knowledge_page(client, run, sub, bob, victor):
    services.save_note(run, by=bob, body="Tried #approach: lr warmup 500")
    services.add_comment(submission=sub, by=bob, body="#approach bigger batch")
    page = login(client, victor).get("/projects/hill/knowledge/").content.decode()
    assert "**Approaches noted by the team** (newest first):" in page
    assert f"- submission #{sub.pk} of run r1, comment by bob" in page and "- run r1, note by bob" in page
    assert page.count("data-approach=") == 2
