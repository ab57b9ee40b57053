"""services.annotations and its reads: tags (labels and key → value), names and pins, notes and comments,
the roles each needs, the audit trail, @mentions in the inbox (once per comment and person), and
`#approach` in the carry-forward block."""

from __future__ import annotations

import json

import pytest

from smrweb.tracking import filters, queries, services
from smrweb.tracking.errors import InvalidInput, NotAllowed
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import (
    AuditEvent,
    Comment,
    Notification,
    NotificationKind,
    NotificationStatus,
    Role,
    Run,
    RunNote,
    RunTag,
    Submission,
)
from smrweb.tracking.queries import alerts as alert_queries
from smrweb.tracking.services import submissions as lifecycle
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def push(project, run_id: str, *events: dict) -> Run:
    services.ingest_events(project, run_id, parse_events(json.dumps(list(events))))
    return Run.objects.get(project=project, external_id=run_id)


@pytest.fixture
def run(project):
    return push(project, "r1", {"type": "score", "score": 0.5})


@pytest.fixture
def sub(run):
    return Submission.objects.get(run=run)


def verbs(project) -> list[str]:
    return list(AuditEvent.objects.filter(project=project).order_by("id").values_list("verb", flat=True))


# --- tags --------------------------------------------------------------------------------------------------


def test_a_label_and_a_key_value_tag_are_one_model(run, bob):
    label = services.set_tag(run, key="baseline", by=bob)
    tag = services.set_tag(run, key="model", value="gpt-5", by=bob)
    assert (label.key, label.value, str(label)) == ("baseline", "", "baseline")
    assert (tag.key, tag.value, str(tag)) == ("model", "gpt-5", "model=gpt-5")
    replaced = services.set_tag(run, key="model", value="gpt-5-mini", by=bob)
    assert replaced.pk == tag.pk and RunTag.objects.filter(run=run).count() == 2
    again = services.set_tag(run, key="model", value="gpt-5-mini", by=bob)  # unchanged: no audit row
    assert again.pk == tag.pk
    assert services.remove_tag(run, key="baseline", by=bob) is True
    assert services.remove_tag(run, key="baseline", by=bob) is False
    assert [t.key for t in RunTag.objects.filter(run=run)] == ["model"]
    events = AuditEvent.objects.filter(project=run.project, verb__startswith="run.").exclude(
        verb="run.created"
    )
    assert [(e.verb, e.detail.get("key"), e.detail.get("before")) for e in events.order_by("id")] == [
        ("run.tagged", "baseline", None),
        ("run.tagged", "model", None),
        ("run.tagged", "model", "gpt-5"),
        ("run.untagged", "baseline", None),
    ]
    assert all(e.actor_label == "bob" and e.object_type == "run" for e in events)


@pytest.mark.parametrize(
    ("key", "value", "field"),
    [
        ("", "", "key"),
        ("has\ttab", "", "key"),  # (inner spaces are fine: MLflow keys have them)
        ("-leading-dash", "", "key"),
        ("a=b", "", "key"),
        ("k" * 251, "", "key"),
        ("ok", "two\nlines", "value"),
        ("ok", "x" * 5001, "value"),
        ("ok\x00", "", "key"),
        ("ok", "nul\x00", "value"),
    ],
)
def test_a_bad_tag_is_refused_naming_its_field(run, bob, key, value, field):
    with pytest.raises(InvalidInput) as refused:
        services.set_tag(run, key=key, value=value, by=bob)
    assert refused.value.field == field
    assert not RunTag.objects.exists()


def test_mlflow_style_keys_are_tags(run, bob):
    for key in ("mlflow.runName", "team/owner", "sweep:lr", "_private", "a.b-c_d/e:f"):
        services.set_tag(run, key=key, value="x", by=bob)
    assert RunTag.objects.filter(run=run).count() == 5


def test_parse_tag_reads_a_label_or_key_equals_value():
    assert services.parse_tag(" baseline ") == ("baseline", "")
    assert services.parse_tag("model = gpt-5=mini") == ("model", "gpt-5=mini")
    with pytest.raises(InvalidInput) as refused:
        services.parse_tag("bad!key")  # (spaces are fine: MLflow keys have them)
    assert refused.value.field == "tag"


def test_who_may_label_runs(project, run, alice, bob, victor, carol, token, other_project):
    from smrweb.tracking.models import ApiToken

    hill_token = ApiToken.objects.get(project=project)
    services.set_tag(run, key="by-token", by=hill_token)  # a harness labels its runs
    services.update_run_labels(run, by=hill_token, pinned=True)
    services.set_tag(run, key="by-admin", by=alice)
    for who in (victor, carol):
        with pytest.raises(NotAllowed):
            services.set_tag(run, key="nope", by=who)
        with pytest.raises(NotAllowed):
            services.update_run_labels(run, by=who, display_name="nope")
    other_token, _ = services.create_api_token(other_project, name="o")
    with pytest.raises(NotAllowed):
        services.set_tag(run, key="nope", by=other_token)
    assert AuditEvent.objects.filter(verb="run.tagged", actor_label="token:ci").exists()


def test_a_display_name_and_a_pin_are_audited(run, bob):
    run = services.update_run_labels(run, by=bob, display_name="  Warmup sweep  ", pinned=True)
    assert (run.display_name, run.pinned, run.name) == ("Warmup sweep", True, "Warmup sweep")
    services.update_run_labels(run, by=bob, display_name="Warmup sweep", pinned=True)  # nothing changes
    run = services.update_run_labels(run, by=bob, display_name="", pinned=False)
    assert (run.display_name, run.pinned, run.name) == ("", False, "r1")
    assert [v for v in verbs(run.project) if v.startswith("run.") and v != "run.created"] == [
        "run.renamed",
        "run.pinned",
        "run.renamed",
        "run.unpinned",
    ]
    with pytest.raises(InvalidInput) as refused:
        services.update_run_labels(run, by=bob, display_name="two\nlines")
    assert refused.value.field == "display_name"
    with pytest.raises(InvalidInput):
        services.update_run_labels(run, by=bob, budget_usd=5)  # not a label


def test_labels_move_the_pages_poll_version(run, bob):
    before = Run.objects.get(pk=run.pk).updated
    services.set_tag(run, key="x", by=bob)
    assert Run.objects.get(pk=run.pk).updated > before


# --- the runs filter and the sort --------------------------------------------------------------------------


def test_the_tag_filter_ands_repeated_tags_and_matches_values(project, bob):
    a, b, c = (push(project, name, {"type": "state", "state": "running"}) for name in ("a", "b", "c"))
    services.set_tag(a, key="baseline", by=bob)
    services.set_tag(a, key="model", value="gpt-5", by=bob)
    services.set_tag(b, key="baseline", by=bob)
    services.set_tag(b, key="model", value="o3", by=bob)
    services.set_tag(c, key="model", value="gpt-5", by=bob)

    def names(*tags):
        return sorted(
            filters.tagged(Run.objects.filter(project=project), list(tags)).values_list(
                "external_id", flat=True
            )
        )

    assert names("baseline") == ["a", "b"]
    assert names("model") == ["a", "b", "c"]
    assert names("model=gpt-5") == ["a", "c"]
    assert names("baseline", "model=gpt-5") == ["a"]
    assert names("model=") == []  # a label named model: nobody has one
    assert names("nothing") == []


def test_pinned_runs_sort_first_in_any_order(project, bob):
    runs = [
        push(project, name, {"type": "score", "score": s}) for name, s in (("a", 0.1), ("b", 0.9), ("c", 0.5))
    ]
    services.update_run_labels(runs[0], by=bob, pinned=True)
    qs = Run.objects.filter(project=project)
    assert [r.external_id for r in filters.sort_runs(qs, "-best")] == ["a", "b", "c"]
    assert [r.external_id for r in filters.sort_runs(qs, "best")] == ["a", "c", "b"]


def test_the_run_sort_and_search_use_the_display_name(project, bob):
    a, b = (
        push(project, "zzz", {"type": "state", "state": "running"}),
        push(project, "aaa", {"type": "state", "state": "running"}),
    )
    services.update_run_labels(a, by=bob, display_name="Alpha")
    services.update_run_labels(b, by=bob, display_name="Beta")
    assert [r.external_id for r in filters.sort_runs(Run.objects.filter(project=project), "run")] == [
        "zzz",
        "aaa",
    ]
    found = filters.RunFilter({"q": "alph"}, queryset=Run.objects.filter(project=project)).qs
    assert [r.external_id for r in found] == ["zzz"]
    services.set_tag(b, key="sweep", value="warmup", by=bob)
    found = filters.RunFilter({"q": "warmup"}, queryset=Run.objects.filter(project=project)).qs
    assert [r.external_id for r in found] == ["aaa"]


# --- notes --------------------------------------------------------------------------------------------------


def test_a_note_is_written_replaced_and_cleared_by_reviewers(run, alice, bob, victor, token):
    from smrweb.tracking.models import ApiToken

    note = services.save_note(run, by=bob, body="  Diverged at step 3.  ")
    assert (note.body, note.edited_by) == ("Diverged at step 3.", bob)
    note = services.save_note(run, by=alice, body="Diverged at step 3. #approach: smaller lr")
    assert note.edited_by == alice and RunNote.objects.count() == 1
    assert services.save_note(run, by=alice, body=note.body) == note  # unchanged: no audit row
    assert services.save_note(run, by=alice, body="   ") is None
    assert not RunNote.objects.exists()
    assert [v for v in verbs(run.project) if "note" in v] == [
        "run.note_edited",
        "run.note_edited",
        "run.note_cleared",
    ]
    edited = AuditEvent.objects.filter(verb="run.note_edited").order_by("id")
    assert [e.detail["approach"] for e in edited] == [False, True]
    for who in (victor, ApiToken.objects.get(project=run.project)):  # viewers read; a token is no author
        with pytest.raises(NotAllowed):
            services.save_note(run, by=who, body="x")
    with pytest.raises(InvalidInput) as refused:
        services.save_note(run, by=bob, body="x" * 20_001)
    assert refused.value.field == "body"


def test_the_note_is_rendered_safely_with_mentions(run, bob):
    services.save_note(
        run, by=bob, body="<script>alert(1)</script> **bold** @Victor [x](javascript:alert(1))"
    )
    note, html = queries.annotations.run_note(run)
    assert "<script" not in html and "&lt;script&gt;" in html and "<strong>bold</strong>" in html
    assert '<span class="mention" title="@victor">@victor</span>' in html
    assert "javascript:" not in html.split("</strong>")[1].replace("[x](javascript:alert(1))", "")


# --- comments and mentions ----------------------------------------------------------------------------------


def inbox_of(user) -> list[Notification]:
    return list(alert_queries.inbox(user))


def test_a_mention_of_a_member_lands_in_their_inbox_once(run, alice, bob, victor, carol):
    comment = services.add_comment(
        run=run, by=bob, body="@VICTOR see this; @carol is no member; `@alice` is code"
    )
    [mention] = inbox_of(victor)
    assert (mention.kind, mention.comment, mention.recipient, mention.rule) == (
        "mention",
        comment,
        victor,
        None,
    )
    assert mention.status == NotificationStatus.SENT and mention.read_at is None
    assert mention.title.startswith("bob mentioned you on run r1") and "@VICTOR see this" in mention.body
    assert mention.url.endswith(f"/projects/hill/runs/r1/#comment-{comment.pk}")
    assert inbox_of(carol) == [] and inbox_of(alice) == [] and inbox_of(bob) == []
    assert alert_queries.unread_count(victor) == 1
    assert AuditEvent.objects.get(verb="comment.added").detail["mentioned"] == ["victor"]

    # Edits notify only whom they newly mention; victor is not told twice.
    services.edit_comment(comment, by=bob, body="@victor @alice see this, @bob (myself)")
    services.edit_comment(comment, by=bob, body="@victor and @alice again, edited")
    assert len(inbox_of(victor)) == 1 and len(inbox_of(alice)) == 1 and inbox_of(bob) == []
    assert [
        e.detail["mentioned"] for e in AuditEvent.objects.filter(verb="comment.edited").order_by("id")
    ] == [
        ["alice"],
        [],
    ]
    assert Notification.objects.filter(kind=NotificationKind.MENTION).count() == 2

    services.mark_read(victor)
    assert alert_queries.unread_count(victor) == 0


def test_a_mention_on_a_submission_names_it(sub, bob, victor):
    comment = services.add_comment(submission=sub, by=bob, body="@victor verify this one")
    [mention] = inbox_of(victor)
    assert f"submission #{sub.pk} of run r1" in mention.title
    assert mention.url.endswith(f"/projects/hill/submissions/{sub.pk}/#comment-{comment.pk}")
    assert (mention.run, mention.submission) == (sub.run, sub)


def test_someone_who_left_the_project_no_longer_reads_its_mentions(project, run, alice, bob, victor):
    services.add_comment(run=run, by=bob, body="@victor hello")
    services.remove_member(project, victor, by=alice)
    assert inbox_of(victor) == [] and alert_queries.unread_count(victor) == 0
    services.add_comment(run=run, by=bob, body="@victor again")  # no longer a member: not notified
    assert Notification.objects.filter(recipient=victor).count() == 1


def test_an_inactive_member_is_not_mentioned(project, run, bob):
    dora = UserFactory(username="dora", is_active=False)
    services.add_member(project, dora, role=Role.VIEWER)
    services.add_comment(run=run, by=bob, body="@dora")
    assert not Notification.objects.filter(recipient=dora).exists()


def test_who_may_comment_edit_and_delete(project, run, alice, bob, victor, carol, token):
    from smrweb.tracking.models import ApiToken

    comment = services.add_comment(run=run, by=bob, body="mine")
    for who in (victor, carol, ApiToken.objects.get(project=project)):
        with pytest.raises(NotAllowed):
            services.add_comment(run=run, by=who, body="x")
    with pytest.raises(NotAllowed):
        services.edit_comment(comment, by=alice, body="an admin cannot rewrite bob's words")
    with pytest.raises(NotAllowed):
        services.delete_comment(comment, by=victor)
    reviewer = UserFactory(username="rita")
    services.add_member(project, reviewer, role=Role.REVIEWER)
    with pytest.raises(NotAllowed):
        services.delete_comment(comment, by=reviewer)  # another reviewer's comment
    services.delete_comment(comment, by=alice)  # an admin moderates
    comment.refresh_from_db()
    assert comment.is_deleted and comment.body == ""
    assert AuditEvent.objects.get(verb="comment.deleted").detail == {"by_author": False}


def test_a_deleted_comment_keeps_its_place_and_loses_its_text_and_mentions(run, bob, victor):
    comment = services.add_comment(run=run, by=bob, body="@victor look")
    services.add_comment(run=run, by=bob, body="second")
    services.delete_comment(comment, by=bob)
    assert services.delete_comment(comment, by=bob).is_deleted  # again: nothing more happens
    thread = queries.annotations.thread(run=run)
    assert [(c.is_deleted, c.html) for c in thread] == [(True, ""), (False, "<p>second</p>\n")]
    assert inbox_of(victor) == []
    with pytest.raises(InvalidInput):
        services.edit_comment(Comment.objects.get(pk=comment.pk), by=bob, body="back?")
    assert AuditEvent.objects.filter(verb="comment.deleted").count() == 1


@pytest.mark.parametrize("body", ["", "   ", "x" * 20_001, "nul\x00"])
def test_a_bad_comment_is_refused(run, bob, body):
    with pytest.raises(InvalidInput) as refused:
        services.add_comment(run=run, by=bob, body=body)
    assert refused.value.field == "body" and not Comment.objects.exists()


def test_a_comment_is_on_one_subject(run, sub, bob):
    with pytest.raises(InvalidInput):
        services.add_comment(run=run, submission=sub, by=bob, body="both")
    with pytest.raises(InvalidInput):
        services.add_comment(by=bob, body="neither")


def test_a_thread_reads_in_a_fixed_number_of_queries(run, bob, django_assert_max_num_queries):
    for i in range(30):
        services.add_comment(run=run, by=bob, body=f"comment {i} @victor")
    with django_assert_max_num_queries(2):
        thread = queries.annotations.thread(run=run)
    assert len(thread) == 30 and all('class="mention"' in c.html for c in thread)


# --- #approach in the carry-forward block -------------------------------------------------------------------


def test_approach_notes_and_comments_are_carried_forward(project, run, sub, alice, bob):
    other = push(project, "r2", {"type": "state", "state": "running"})
    services.update_run_labels(other, by=bob, display_name="Warmup sweep")
    services.save_note(run, by=bob, body="Diverged.\n\n#approach: lr 3e-4 with 500 warmup steps")
    services.add_comment(run=other, by=alice, body="#Approach — cosine schedule, no warmup")
    services.add_comment(submission=sub, by=bob, body="this one: #approach bigger batch")
    services.add_comment(run=other, by=alice, body="#approaches are plenty, not one")  # not the tag
    services.delete_comment(services.add_comment(run=other, by=alice, body="#approach gone"), by=alice)
    excluded = push(project, "junk", {"type": "state", "state": "running"})
    services.save_note(excluded, by=bob, body="#approach from a junk run")
    lifecycle.exclude_run(excluded, by=alice, reason="junk")

    cf = queries.carry_forward(project, 5)
    assert [(a.source, a.run, a.author) for a in cf.approaches] == [
        ("comment", "r1", "bob"),
        ("comment", "r2", "alice"),
        ("note", "r1", "bob"),
    ]
    assert cf.approaches[0].submission_id == sub.pk and cf.approaches[1].run_name == "Warmup sweep"
    text = cf.text
    assert "**Approaches noted by the team** (newest first):" in text
    section = (
        text.split("**Approaches noted by the team** (newest first):\n")[1].split("\n\n")[0].splitlines()
    )
    day = cf.approaches[0].at.strftime("%Y-%m-%d")
    assert section == [
        f"- submission #{sub.pk} of run r1, comment by bob, {day}: this one: #approach bigger batch",
        f"- run r2 (Warmup sweep), comment by alice, {day}: #Approach — cosine schedule, no warmup",
        f"- run r1, note by bob, {day}: Diverged. #approach: lr 3e-4 with 500 warmup steps",
    ]
    assert text.index("Approaches noted") < text.index("**Latest arena feedback:**")
    assert len(queries.carry_forward(project, 1).approaches) == 1


def test_without_approaches_the_block_has_no_such_section(project, run, bob):
    services.save_note(run, by=bob, body="no hashtag here")
    assert "Approaches noted" not in queries.carry_forward(project).text
