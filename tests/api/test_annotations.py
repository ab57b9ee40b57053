"""The API of what people write on runs and submissions: display_name, pinned and tags on runs, the
`?tag=` filter, tags, the run note and comments (runs and submissions), with their roles and field errors."""

from __future__ import annotations

import json

import pytest

from smrweb.tracking import events as ev
from smrweb.tracking import services
from smrweb.tracking.models import AuditEvent, Comment, Notification, Run, RunTag, Submission
from tests.api.helpers import assert_json_error, session_client

A = "/api/v1/projects/hill"


def ingest(project, run_id: str, *events: dict) -> Run:
    return services.ingest_events(project, run_id, ev.parse_events(json.dumps(list(events)))).run


@pytest.fixture
def run(project):
    return ingest(project, "r1", {"type": "score", "score": 0.5})


@pytest.fixture
def sub(run):
    return Submission.objects.get(run=run)


# --- runs: display_name, pinned, tags, ?tag= ---------------------------------------------------------------


def test_runs_say_their_display_name_pin_and_tags(api, project, run, bob):
    services.set_tag(run, key="baseline", by=bob)
    services.set_tag(run, key="model", value="gpt-5", by=bob)
    services.update_run_labels(run, by=bob, display_name="First try", pinned=True)
    body = api.get(f"{A}/runs/r1").json()
    assert (body["external_id"], body["display_name"], body["pinned"]) == ("r1", "First try", True)
    assert body["tags"] == [{"key": "baseline", "value": ""}, {"key": "model", "value": "gpt-5"}]
    [listed] = api.get(f"{A}/runs").json()["results"]
    assert listed["tags"] == body["tags"]


def test_the_runs_list_puts_pinned_runs_first_and_filters_by_tags(
    api, project, bob, django_assert_max_num_queries
):
    for name in ("a", "b", "c", "d"):
        ingest(project, name, {"type": "state", "state": "running"})
    runs = {r.external_id: r for r in Run.objects.filter(project=project)}
    services.update_run_labels(runs["a"], by=bob, pinned=True)
    for name, model in (("a", "gpt-5"), ("b", "o3"), ("c", "gpt-5")):
        services.set_tag(runs[name], key="model", value=model, by=bob)
    services.set_tag(runs["c"], key="baseline", by=bob)
    services.set_tag(runs["b"], key="baseline", by=bob)

    def names(query: str) -> list[str]:
        response = api.get(f"{A}/runs{query}")
        assert response.status_code == 200, response.content
        return [r["external_id"] for r in response.json()["results"]]

    assert names("")[0] == "a"
    assert names("?sort=run") == ["a", "b", "c", "d"] and names("?sort=-run") == ["a", "d", "c", "b"]
    assert sorted(names("?tag=model")) == ["a", "b", "c"]
    assert sorted(names("?tag=model=gpt-5")) == ["a", "c"]
    assert names("?tag=model%3Dgpt-5&tag=baseline") == ["c"]
    assert names("?tag=nothing") == []
    with django_assert_max_num_queries(8):  # the tags of a page come in one query
        api.get(f"{A}/runs")


def test_a_bad_tag_filter_is_a_400_naming_tag(api, run):
    body = assert_json_error(api.get(f"{A}/runs?tag=has%21bang"), 400, "invalid")
    assert body["errors"][0]["field"] == "tag"


def test_reviewers_and_tokens_name_and_pin_runs_admins_set_budgets(api, project, run, alice, bob, victor):
    answer = session_client(bob).patch(
        f"{A}/runs/r1", {"display_name": "Sweep", "pinned": True}, format="json"
    )
    assert answer.status_code == 200, answer.content
    assert (answer.json()["display_name"], answer.json()["pinned"]) == ("Sweep", True)
    assert_json_error(session_client(bob).patch(f"{A}/runs/r1", {"budget_usd": "5"}, format="json"), 403)
    assert_json_error(
        session_client(bob).patch(f"{A}/runs/r1", {"budget_usd": "5", "pinned": False}, format="json"), 403
    )
    assert_json_error(session_client(victor).patch(f"{A}/runs/r1", {"pinned": False}, format="json"), 403)
    assert api.patch(f"{A}/runs/r1", {"pinned": False}, format="json").json()["pinned"] is False
    both = session_client(alice).patch(f"{A}/runs/r1", {"budget_usd": "5", "display_name": ""}, format="json")
    assert (
        both.status_code == 200
        and both.json()["budget_usd"] == "5.000000"
        and both.json()["display_name"] == ""
    )
    # Labels never create a run (settings do, as before).
    assert_json_error(api.patch(f"{A}/runs/new-run", {"display_name": "x"}, format="json"), 404)
    assert not Run.objects.filter(external_id="new-run").exists()
    assert set(
        AuditEvent.objects.filter(verb__in=["run.renamed", "run.pinned", "run.unpinned"]).values_list(
            "actor_label", flat=True
        )
    ) == {"bob", "token:ci", "alice"}


def test_a_bad_display_name_is_a_400_and_writes_nothing(api, run):
    body = assert_json_error(
        api.patch(f"{A}/runs/r1", {"display_name": "a\nb", "budget_usd": "7"}, format="json"), 400
    )
    assert body["errors"][0]["field"] == "display_name"
    run.refresh_from_db()
    assert run.budget_usd is None
    body = assert_json_error(api.patch(f"{A}/runs/r1", {"display_name": "x" * 201}, format="json"), 400)
    assert body["errors"][0]["field"] == "display_name"


# --- tags ---------------------------------------------------------------------------------------------------


def test_tags_are_listed_set_replaced_and_removed(api, run, victor):
    created = api.post(f"{A}/runs/r1/tags", {"key": "model", "value": "gpt-5"}, format="json")
    assert created.status_code == 201 and created.json() == {"key": "model", "value": "gpt-5"}
    label = api.post(f"{A}/runs/r1/tags", {"key": "team/owner:x"}, format="json")
    assert label.status_code == 201 and label.json() == {"key": "team/owner:x", "value": ""}
    replaced = api.post(f"{A}/runs/r1/tags", {"key": "model", "value": "o3"}, format="json")
    assert replaced.status_code == 200 and replaced.json()["value"] == "o3"
    listed = session_client(victor).get(f"{A}/runs/r1/tags").json()["results"]
    assert listed == [{"key": "model", "value": "o3"}, {"key": "team/owner:x", "value": ""}]
    assert api.delete(f"{A}/runs/r1/tags/team/owner:x").status_code == 204
    assert_json_error(api.delete(f"{A}/runs/r1/tags/team/owner:x"), 404, "not_found")
    assert list(RunTag.objects.values_list("key", flat=True)) == ["model"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"key": "bad!key"}, "key"),
        ({"key": ""}, "key"),
        ({"value": "x"}, "key"),
        ({"key": "k", "value": "a\nb"}, "value"),
    ],
)
def test_a_bad_tag_is_a_400_naming_the_field(api, run, body, field):
    answer = assert_json_error(api.post(f"{A}/runs/r1/tags", body, format="json"), 400)
    assert answer["errors"][0]["field"] == field
    assert not RunTag.objects.exists()


def test_viewers_read_tags_but_do_not_set_them(run, victor, carol):
    assert_json_error(session_client(victor).post(f"{A}/runs/r1/tags", {"key": "x"}, format="json"), 403)
    assert_json_error(session_client(victor).delete(f"{A}/runs/r1/tags/x"), 403)
    assert_json_error(session_client(carol).get(f"{A}/runs/r1/tags"), 404)


# --- the note ----------------------------------------------------------------------------------------------


def test_the_note_is_read_by_viewers_and_written_by_reviewers(api, run, bob, victor):
    empty = api.get(f"{A}/runs/r1/note").json()
    assert empty == {"body": "", "html": "", "edited_by": None, "updated": None}
    hostile = "<img src=x onerror=alert(1)> **ok** [x](javascript:alert(1))"
    written = session_client(bob).put(f"{A}/runs/r1/note", {"body": hostile}, format="json")
    assert written.status_code == 200, written.content
    body = written.json()
    assert body["body"] == hostile and body["edited_by"] == "bob" and body["updated"]
    assert (
        "<img" not in body["html"]
        and "<strong>ok</strong>" in body["html"]
        and 'href="javascript' not in body["html"]
    )
    assert session_client(victor).get(f"{A}/runs/r1/note").json()["body"] == hostile
    assert_json_error(session_client(victor).put(f"{A}/runs/r1/note", {"body": "x"}, format="json"), 403)
    assert_json_error(api.put(f"{A}/runs/r1/note", {"body": "x"}, format="json"), 403)  # a token is no author
    cleared = session_client(bob).put(f"{A}/runs/r1/note", {"body": ""}, format="json").json()
    assert cleared["body"] == "" and cleared["updated"] is None


def test_a_bad_note_is_a_400_naming_body(run, bob):
    for bad in ({"body": "x" * 20_001}, {"body": "nul\x00"}, {}, {"body": ["x"]}):
        answer = assert_json_error(session_client(bob).put(f"{A}/runs/r1/note", bad, format="json"), 400)
        assert answer["errors"][0]["field"] == "body", bad


# --- comments ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("subject", ["run", "submission"])
def test_comments_are_listed_added_edited_and_deleted(subject, api, run, sub, alice, bob, victor):
    url = f"{A}/runs/r1/comments" if subject == "run" else f"{A}/submissions/{sub.pk}/comments"
    added = session_client(bob).post(url, {"body": "<script>x</script> @victor have a look"}, format="json")
    assert added.status_code == 201, added.content
    comment = added.json()
    assert comment["author"] == "bob" and comment["deleted"] is False and comment["edited_at"] is None
    assert "<script" not in comment["html"] and 'class="mention"' in comment["html"]
    assert Notification.objects.filter(kind="mention", recipient=victor).count() == 1

    listed = api.get(url).json()["results"]
    assert [c["id"] for c in listed] == [comment["id"]]

    edited = session_client(bob).patch(
        f"{url}/{comment['id']}", {"body": "@victor @alice edited"}, format="json"
    )
    assert edited.status_code == 200 and edited.json()["edited_at"]
    assert Notification.objects.filter(kind="mention").count() == 2  # alice now; victor not twice
    assert_json_error(
        session_client(alice).patch(f"{url}/{comment['id']}", {"body": "mine?"}, format="json"), 403
    )
    assert_json_error(session_client(bob).patch(f"{url}/{comment['id']}", {"body": ""}, format="json"), 400)

    assert session_client(alice).delete(f"{url}/{comment['id']}").status_code == 204  # an admin moderates
    [gone] = api.get(url).json()["results"]
    assert (gone["deleted"], gone["body"], gone["html"]) == (True, "", "")
    assert not Notification.objects.filter(kind="mention").exists()
    verbs = list(
        AuditEvent.objects.filter(verb__startswith="comment.").order_by("id").values_list("verb", flat=True)
    )
    assert verbs == ["comment.added", "comment.edited", "comment.deleted"]


def test_who_may_write_comments(api, run, sub, bob, victor, carol):
    url = f"{A}/runs/r1/comments"
    assert_json_error(session_client(victor).post(url, {"body": "x"}, format="json"), 403)
    assert_json_error(api.post(url, {"body": "x"}, format="json"), 403)  # tokens read, people write
    assert_json_error(session_client(carol).post(url, {"body": "x"}, format="json"), 404)
    assert_json_error(session_client(carol).get(url), 404)
    assert session_client(victor).get(url).status_code == 200
    comment = services.add_comment(run=run, by=bob, body="on the run")
    # The comment of another subject is not this one's.
    assert_json_error(
        session_client(bob).patch(
            f"{A}/submissions/{sub.pk}/comments/{comment.pk}", {"body": "x"}, format="json"
        ),
        404,
    )
    assert_json_error(session_client(victor).delete(f"{url}/{comment.pk}"), 403)
    assert_json_error(api.delete(f"{url}/{comment.pk}"), 403)
    assert not Comment.objects.get(pk=comment.pk).is_deleted


def test_a_bad_comment_is_a_400_naming_body(run, bob):
    for bad in ({"body": ""}, {"body": "   "}, {}, {"body": "x" * 20_001}, {"body": ["x"]}):
        answer = assert_json_error(session_client(bob).post(f"{A}/runs/r1/comments", bad, format="json"), 400)
        assert answer["errors"][0]["field"] == "body", bad
    assert not Comment.objects.exists()


def test_approaches_are_in_the_carry_forward_answer(api, run, bob):
    services.save_note(run, by=bob, body="#approach: smaller lr")
    body = api.get(f"{A}/knowledge/carry-forward").json()
    [approach] = body["approaches"]
    assert {k: approach[k] for k in ("source", "run", "run_name", "submission_id", "author", "text")} == {
        "source": "note",
        "run": "r1",
        "run_name": "",
        "submission_id": None,
        "author": "bob",
        "text": "#approach: smaller lr",
    }
    assert "**Approaches noted by the team** (newest first):\n- run r1, note by bob" in body["text"]
