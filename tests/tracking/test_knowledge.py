"""Project knowledge: the carry-forward block (best in both directions, the failed list's sources,
order, dedupe and why, arena feedback, n bounds, a flat query count) and the audited, validated
write path for entries. Histories are built through ingest and the lifecycle functions."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from io import BytesIO

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from smrweb.tracking import queries, services
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import (
    AuditEvent,
    KnowledgeEntry,
    KnowledgeKind,
    Project,
    Run,
    Submission,
    SubmissionStatus,
    VerificationOutcome,
)
from smrweb.tracking.services import handoff, knowledge
from smrweb.tracking.services import submissions as lifecycle
from tests.factories import admin_project

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 4, 17, 12, tzinfo=UTC)
FAILED = KnowledgeKind.FAILED_APPROACH


def scored(project, value, minute, run="r1", **extra) -> Submission:
    event = {"type": "score", "score": value, "ts": (T0 + timedelta(minutes=minute)).isoformat(), **extra}
    services.ingest_events(project, run, parse_events(json.dumps([event])))
    return Submission.objects.filter(project=project).order_by("-id").first()


def invalid(sub, bob, detail="exited 1", output="", code=1) -> Submission:
    lifecycle.request_verification(sub, by=bob)
    return lifecycle.record_verification(
        sub.pk, lifecycle.VerificationResult(VerificationOutcome.FAILED, code, output, detail)
    )


def verified(sub, bob) -> Submission:
    lifecycle.request_verification(sub, by=bob)
    return lifecycle.record_verification(
        sub.pk, lifecycle.VerificationResult(VerificationOutcome.PASSED, 0, "", "ok")
    )


def rejected(sub, bob, alice, comment="") -> Submission:
    return lifecycle.review(verified(sub, bob), by=alice, verdict="reject", comment=comment).submission


def ranked(sub, bob, alice, rank=10, arena_score=1000.0, note=""):
    sub = lifecycle.review(verified(sub, bob), by=alice, verdict="approve").submission
    sub = handoff.mark_uploaded(sub, by=alice)
    return handoff.record_arena_result(sub, by=alice, rank=rank, arena_score=arena_score, note=note)


def minimizing(alice) -> Project:
    scenario = services.create_scenario(key="golf", name="Golf", direction="minimize", score_metric="strokes")
    return admin_project("golf", scenario=scenario, by=alice)


def with_threshold(project, value) -> Project:
    # No service sets it yet (a project setting, not history): the one place a row is poked.
    Project.objects.filter(pk=project.pk).update(regression_threshold=value)
    project.refresh_from_db()
    return project


# --- best so far ------------------------------------------------------------------------------------


def test_best_is_the_highest_score_when_maximizing(project):
    for minute, value in enumerate([0.5, 0.9, 0.2]):
        scored(project, value, minute)
    best = queries.carry_forward(project).best
    assert best.score == 0.9 and best.run == "r1" and best.status == "candidate" and best.arena is None


def test_best_is_the_lowest_score_when_minimizing(alice):
    golf = minimizing(alice)
    for minute, value in enumerate([5.0, 3.0, 4.0]):
        scored(golf, value, minute)
    cf = queries.carry_forward(golf)
    assert cf.best.score == 3.0
    assert cf.text.startswith("## Carry-forward: golf (minimize strokes)")


def test_ties_go_to_the_earliest_score(project):
    first = scored(project, 0.7, 1, run="early")
    scored(project, 0.7, 2, run="late")
    assert queries.carry_forward(project).best.submission_id == first.pk


def test_best_skips_invalid_and_rejected_scores_and_carries_artifact_and_arena(project, alice, bob):
    invalid(scored(project, 0.99, 1), bob)
    rejected(scored(project, 0.95, 2), bob, alice, comment="overfits the seed")
    data = b"def optimize(): ..."
    services.store_artifact(project, "r2", path="submission/optimizer.py", content=BytesIO(data))
    good = scored(project, 0.9, 3, run="r2", artifact="submission/optimizer.py", commit="abcdef1234567890")
    ranked(good, bob, alice, rank=12, arena_score=1234.0, note="beat the baseline")
    best = queries.carry_forward(project).best
    assert (best.submission_id, best.score, best.run, best.status) == (good.pk, 0.9, "r2", "ranked")
    assert best.artifact_path == "submission/optimizer.py"
    assert best.artifact_sha256 == hashlib.sha256(data).hexdigest()[:12]
    assert (best.arena.rank, best.arena.arena_score, best.arena.note) == (12, 1234.0, "beat the baseline")


def test_a_digest_ref_not_uploaded_yet_is_shown_as_a_sha_prefix(project):
    digest = "ab" * 32
    scored(project, 0.4, 1, artifact=digest)
    best = queries.carry_forward(project).best
    assert (best.artifact_path, best.artifact_sha256) == ("", digest[:12])


def test_no_history_renders_a_block_that_says_so(project):
    cf = queries.carry_forward(project)
    assert (cf.best, cf.failed, cf.arena) == (None, [], None)
    assert queries.render_carry_forward(cf) == (
        "## Carry-forward: hill (maximize score)\n\n**Best so far:** no valid score yet.\n\n"
        "**Last 3 failed or regressed approaches** (newest first):\nnone recorded.\n\n"
        "**Latest arena feedback:** none yet."
    )


# --- failed or regressed ----------------------------------------------------------------------------


def test_failed_list_is_newest_first_with_score_and_why(project, alice, bob):
    broken = invalid(
        scored(project, 0.99, 1),
        bob,
        detail="validator exited 1",
        output="loading model\nlayer 3 has 300k params (limit 250k)\n",
    )
    refused = rejected(scored(project, 0.95, 2), bob, alice, comment="overfits the seed")
    entry = knowledge.add_entry(
        project, by=bob, kind=FAILED, title="Pure random search", body="Plateaued at 0.4 after two hours."
    )
    failed = queries.carry_forward(project).failed
    assert [(f.reasons, f.score, f.submission_id, f.entry_id) for f in failed] == [
        (["failed_approach"], None, None, entry.pk),
        (["rejected"], 0.95, refused.pk, None),
        (["invalid"], 0.99, broken.pk, None),
    ]
    assert failed[0].title == "Pure random search" and failed[0].why == "Plateaued at 0.4 after two hours."
    assert failed[1].why == "rejected by alice: overfits the seed"
    assert failed[2].why == (
        "verification failed (exit 1): validator exited 1 — layer 3 has 300k params (limit 250k)"
    )


def test_n_cuts_the_list_to_the_newest(project, bob):
    entries = [knowledge.add_entry(project, by=bob, kind=FAILED, title=f"idea {i}") for i in range(6)]
    assert [f.entry_id for f in queries.carry_forward(project, 2).failed] == [entries[5].pk, entries[4].pk]
    assert len(queries.carry_forward(project).failed) == 3
    assert len(queries.carry_forward(project, 20).failed) == 6


def test_notes_and_arena_entries_are_not_failed_approaches(project, bob):
    knowledge.add_entry(project, by=bob, kind=KnowledgeKind.NOTE, title="Scoring is Elo over 100 matches")
    assert queries.carry_forward(project).failed == []


def test_a_submission_found_by_several_sources_is_one_item_with_every_reason(project, alice, bob):
    sub = invalid(scored(project, 0.8, 1, experiment="wide-mlp"), bob, detail="params over the limit")
    knowledge.add_entry(
        project, by=bob, kind=FAILED, title="Wide MLP", body="400k params: too big.", submission=sub
    )
    knowledge.add_entry(
        project, by=alice, kind=FAILED, title="Wide MLP again", body="400k params: too big.", submission=sub
    )
    failed = queries.carry_forward(project).failed
    assert len(failed) == 1
    item = failed[0]
    assert (
        item.reasons == ["invalid", "failed_approach"] and item.submission_id == sub.pk and item.score == 0.8
    )
    assert item.title == "Wide MLP again"  # the newest hand-written name wins over the experiment id
    assert item.why == "verification failed (exit 1): params over the limit; 400k params: too big."


def test_score_regressions_count_only_with_a_threshold(project):
    for minute, value in enumerate([0.5, 0.9, 0.6, 0.85, 0.95, 0.7]):
        scored(project, value, minute)
    assert queries.carry_forward(project, 20).failed == []  # no threshold: hill climbing is not failing
    with_threshold(project, 0.1)
    failed = queries.carry_forward(project, 20).failed
    assert [(f.reasons, f.score) for f in failed] == [(["regressed"], 0.7), (["regressed"], 0.6)]
    assert failed[0].why == "0.25 worse than its run's best so far then (0.95)"
    assert failed[1].why == "0.3 worse than its run's best so far then (0.9)"


def test_score_regressions_follow_a_minimizing_scenario_and_ignore_refused_bests(alice):
    golf = with_threshold(minimizing(alice), 0.5)
    scored(golf, 5.0, 1)
    invalid(scored(golf, 1.0, 2), alice)  # refused: not a best to regress from
    scored(golf, 5.4, 3)  # 0.4 worse than 5.0: under the threshold
    worse = scored(golf, 6.0, 4)
    failed = queries.carry_forward(golf, 20).failed
    assert [(f.reasons, f.submission_id) for f in failed if f.reasons == ["regressed"]] == [
        (["regressed"], worse.pk)
    ]


def test_arena_results_worse_than_the_previous_one_are_carried_as_regressions(project, alice, bob):
    ranked(scored(project, 0.9, 1), bob, alice, rank=12, arena_score=1200.0)
    worse = scored(project, 0.92, 2)
    ranked(worse, bob, alice, rank=20, arena_score=1150.0, note="lost to the corner campers")
    failed = queries.carry_forward(project).failed
    assert [(f.reasons, f.submission_id) for f in failed] == [(["arena_regressed"], worse.pk)]
    assert failed[0].why == "arena rank 20, score 1150 (-50 vs previous): lost to the corner campers"


# --- arena feedback ---------------------------------------------------------------------------------


def test_latest_arena_feedback_is_the_newest_result_not_its_own_entry(project, alice, bob):
    ranked(scored(project, 0.9, 1), bob, alice, rank=12, arena_score=1200.0)
    second = scored(project, 0.95, 2)
    ranked(second, bob, alice, rank=7, arena_score=1260.0, note="better in close range")
    arena = queries.carry_forward(project).arena
    assert arena.source == "result" and arena.submission_id == second.pk
    assert (arena.rank, arena.arena_score, arena.delta, arena.delta_best) == (7, 1260.0, 60.0, 60.0)
    assert arena.note == "better in close range"
    assert (
        KnowledgeEntry.objects.filter(kind=KnowledgeKind.ARENA_DELTA).count() == 2
    )  # written, not shown twice


def test_a_newer_hand_written_arena_entry_is_the_latest_feedback(project, alice, bob):
    ranked(scored(project, 0.9, 1), bob, alice, rank=12, arena_score=1200.0)
    knowledge.add_entry(
        project,
        by=bob,
        kind=KnowledgeKind.ARENA_DELTA,
        title="Dropped to rank 15 overnight",
        body="New entrants; our score unchanged.",
    )
    arena = queries.carry_forward(project).arena
    assert arena.source == "entry" and arena.rank is None
    assert arena.note == "Dropped to rank 15 overnight\nNew entrants; our score unchanged."


def test_without_results_the_newest_arena_entry_is_used(project, bob):
    knowledge.add_entry(project, by=bob, kind=KnowledgeKind.ARENA_DELTA, title="Rank 30 on first upload")
    assert queries.carry_forward(project).arena.note == "Rank 30 on first upload"


# --- n, text, queries -------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, -1, 21, 1000])
def test_n_outside_1_to_20_is_refused(project, n):
    with pytest.raises(InvalidInput) as refused:
        queries.carry_forward(project, n)
    assert refused.value.field == "n"


@pytest.mark.parametrize(("raw", "n"), [(None, 3), ("", 3), ("1", 1), ("20", 20), (" 7 ", 7)])
def test_parse_n_accepts(raw, n):
    assert queries.parse_n(raw) == n


@pytest.mark.parametrize("raw", ["abc", "1.5", "0", "21", "-3", "1e3"])
def test_parse_n_refuses(raw):
    with pytest.raises(InvalidInput) as refused:
        queries.parse_n(raw)
    assert refused.value.field == "n" and "between 1 and 20" in refused.value.message


def test_the_rendered_block_has_every_part_on_its_own_line(project, alice, bob):
    good = scored(project, 0.9, 1, run="run-a", experiment="small-mlp")
    ranked(good, bob, alice, rank=12, arena_score=1234.0, note="beat\nthe baseline")
    rejected(scored(project, 0.95, 2, run="run-b"), bob, alice, comment="overfits")
    knowledge.add_entry(project, by=bob, kind=FAILED, title="Random search", body="plateaued\n\nat 0.4")
    lines = queries.carry_forward(project).text.splitlines()
    assert lines[0] == "## Carry-forward: hill (maximize score)"
    assert (
        lines[2] == f"**Best so far:** 0.9 — run run-a, submission #{good.pk} (ranked), experiment small-mlp"
    )
    assert lines[3].startswith("  arena: generic: rank 12, score 1234 (n/a vs previous, n/a vs best), ")
    assert lines[3].endswith(" — beat the baseline")
    assert lines[5] == "**Last 2 failed or regressed approaches** (newest first):"
    assert lines[6] == "1. [failed approach] Random search (no score): plateaued at 0.4"
    assert lines[7].startswith("2. [rejected] submission #") and lines[7].endswith(
        "(score 0.95, run run-b): rejected by alice: overfits"
    )
    assert lines[9].startswith("**Latest arena feedback:** generic: rank 12, score 1234")
    assert f" for submission #{good.pk} (score 0.9) from run run-a, " in lines[9]  # named by its number


def _history(project, alice, bob, size: int) -> None:
    with_threshold(project, 0.05)
    for i in range(size):
        scored(project, 0.5 + (i % 5) / 10, i, run=f"r{i % 3}", experiment=f"exp-{i}")
    subs = list(Submission.objects.filter(project=project, status=SubmissionStatus.CANDIDATE).order_by("id"))
    for i, sub in enumerate(subs[: size // 3]):
        (invalid(sub, bob) if i % 2 else rejected(sub, bob, alice, comment=f"no {i}"))
    for i, sub in enumerate(subs[size // 3 : size // 3 + 2 + size // 10]):
        ranked(sub, bob, alice, rank=50 - i, arena_score=1000.0 + (-1) ** i * i)
    for i in range(size // 2):
        knowledge.add_entry(
            project, by=bob, kind=FAILED, title=f"idea {i}", submission=subs[-1] if i % 2 else None
        )
    # Notes and comments that say #approach, on runs and on submissions.
    for i in range(size // 3):
        run = Run.objects.get(project=project, external_id=f"r{i % 3}")
        services.save_note(run, by=bob, body=f"#approach number {i} of {size}")
        services.add_comment(run=run, by=alice, body=f"#approach comment {i}")
        services.add_comment(submission=subs[i], by=bob, body=f"#approach on a submission {i}")


def _queries(project, n) -> int:
    with CaptureQueriesContext(connection) as captured:
        queries.carry_forward(project, n).text  # noqa: B018 — rendering must not query either
    return len(captured)


def test_the_query_count_does_not_grow_with_history(project, alice, bob, django_assert_max_num_queries):
    _history(project, alice, bob, 6)
    small = _queries(project, 3)
    _history(project, alice, bob, 40)
    assert _queries(project, 20) == small
    with django_assert_max_num_queries(12):
        cf = queries.carry_forward(project, 20)
    assert len(cf.failed) == 20 and cf.best and cf.arena and len(cf.approaches) == 20


# --- the write path ---------------------------------------------------------------------------------


def test_add_and_edit_are_audited(project, alice, bob):
    sub = scored(project, 0.3, 1)
    entry = knowledge.add_entry(
        project, by=bob, kind=FAILED, title="  Tiny CNN  ", body="too slow\n", submission=sub
    )
    assert (entry.title, entry.body, entry.submission, entry.created_by) == ("Tiny CNN", "too slow", sub, bob)
    knowledge.edit_entry(
        entry, by=alice, kind=KnowledgeKind.NOTE, title="Tiny CNN (retired)", body="too slow"
    )
    entry.refresh_from_db()
    assert (entry.kind, entry.title) == ("note", "Tiny CNN (retired)")
    events = list(
        AuditEvent.objects.filter(object_type="knowledgeentry")
        .order_by("id")
        .values_list("actor_label", "verb", "object_id", "detail")
    )
    assert events == [
        (
            "bob",
            "knowledge.added",
            str(entry.pk),
            {"kind": "failed_approach", "title": "Tiny CNN", "submission": sub.pk},
        ),
        (
            "alice",
            "knowledge.edited",
            str(entry.pk),
            {"changed": ["kind", "title"], "before": {"kind": "failed_approach", "title": "Tiny CNN"}},
        ),
    ]


def test_an_edit_that_changes_nothing_is_not_audited(project, bob):
    entry = knowledge.add_entry(project, by=bob, kind=FAILED, title="same")
    knowledge.edit_entry(entry, by=bob, kind=FAILED, title="same", body="")
    assert not AuditEvent.objects.filter(verb="knowledge.edited").exists()


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"title": "   "}, "title", "Give the entry a title."),
        ({"title": "x" * 301}, "title", "at most 300 characters (this one has 301)"),
        ({"body": "y" * (knowledge.BODY_MAX + 1)}, "body", f"at most {knowledge.BODY_MAX} characters"),
        ({"kind": "rumour"}, "kind", "Choose one of note, failed_approach, arena_delta"),
        ({"title": "nul\x00"}, "title", "NUL"),
        ({"body": "nul\x00"}, "body", "NUL"),
    ],
)
def test_bad_fields_are_refused_with_the_field_named(project, bob, fields, field, message):
    good = {"kind": FAILED, "title": "ok", "body": ""}
    for write in (
        lambda _: knowledge.add_entry(project, by=bob, **{**good, **fields}),
        lambda entry: knowledge.edit_entry(entry, by=bob, **{**good, **fields}),
    ):
        entry = KnowledgeEntry.objects.create(project=project, title="before")
        with pytest.raises(InvalidInput) as refused:
            write(entry)
        assert refused.value.field == field and message in refused.value.message
        entry.refresh_from_db()
        assert entry.title == "before"
    assert KnowledgeEntry.objects.filter(project=project).count() == 2  # only the two made here
    assert not AuditEvent.objects.filter(verb__startswith="knowledge.").exists()


def test_a_300_character_title_is_fine(project, bob):
    assert len(knowledge.add_entry(project, by=bob, kind=FAILED, title="t" * 300).title) == 300


def test_another_projects_submission_cannot_be_linked(project, other_project, bob):
    theirs = scored(other_project, 0.1, 1)
    with pytest.raises(InvalidInput) as refused:
        knowledge.add_entry(project, by=bob, kind=FAILED, title="x", submission=theirs)
    assert refused.value.field == "submission"


def test_viewers_and_outsiders_cannot_write(project, victor, carol, bob):
    entry = knowledge.add_entry(project, by=bob, kind=FAILED, title="x")
    for who in (victor, carol, None):
        with pytest.raises(lifecycle.NotAllowed):
            knowledge.add_entry(project, by=who, kind=FAILED, title="y")
        with pytest.raises(lifecycle.NotAllowed):
            knowledge.edit_entry(entry, by=who, kind=FAILED, title="y", body="")
    assert KnowledgeEntry.objects.filter(project=project).count() == 1
