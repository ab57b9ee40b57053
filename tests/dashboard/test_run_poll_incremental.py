"""Issue 36: a run page's poll after a new turn and score costs about what an unchanged poll costs. The
timeline's score side is extended by the scores that arrived since, not read again: what it shows equals
a timeline read from scratch after random sequences of turns (a child actor's too, late ones), scores (late
ones), exclusions and verifications, at resolutions small enough that the stride and the
thinning both move."""

from __future__ import annotations

import random
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.db.models import Count, Sum
from django.test.utils import CaptureQueriesContext

from smrweb.dashboard import charts, live
from smrweb.tracking.models import Direction, Run, Submission
from smrweb.tracking.queries import markers, timeline, timeline_scores
from smrweb.tracking.services import submissions
from smrweb.tracking.services.submissions import VerificationResult
from tests.factories import push

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat()


def turn(n: int, minutes: float, actor: str = "driver", parent: str | None = None) -> dict:
    event = {
        "type": "agent.turn",
        "turn": n,
        "actor": actor,
        "tokens_in": 100 + n,
        "tokens_out": 10,
        "cost_usd": 0.001,
        "ts": at(minutes),
    }
    if parent:
        event["parent_actor"] = parent
    return event


def _scores_version(run: Run) -> str:
    """The version the run page keys the score side by (`RunPage.timeline`)."""
    m = markers.run_markers(run, T0)
    return live.card_version(run.score_count, m.submission_last, m.submissions_updated)


def _figure(run: Run, tl) -> dict:
    scenario = run.project.scenario
    return charts.run_timeline_figure(
        tl,
        maximize=scenario.maximize,
        metric=scenario.score_metric,
        budget_usd=None,
        burn=None,
        uirevision="x",
    )


@pytest.fixture
def small(monkeypatch):
    """A resolution of 6 points, so that the stride doubles and records get thinned within a test."""
    monkeypatch.setattr(timeline_scores, "MAX_SCORE_POINTS", 6)
    monkeypatch.setattr(timeline_scores, "THIN_ABOVE", 9, raising=False)
    reads = []
    read = timeline_scores.score_side

    def counted(*args, **kwargs):
        reads.append(1)
        return read(*args, **kwargs)

    monkeypatch.setattr(timeline_scores, "score_side", counted)
    return reads


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
def test_the_extended_score_side_equals_a_timeline_read_from_scratch(project, alice, small, seed):
    rng = random.Random(seed)
    project.scenario.direction = Direction.MAXIMIZE if seed % 2 else Direction.MINIMIZE
    project.scenario.save()
    push(project, "live", {"type": "state", "state": "running", "ts": at(0)})
    clock, n, steps = 1.0, 0, 70
    for _ in range(steps):
        op = rng.random()
        subs = list(Submission.objects.filter(run__external_id="live"))
        events = []
        if op < 0.8 or not subs:
            for _ in range(rng.choice([1, 1, 1, 2, 3])):
                clock += rng.uniform(0.2, 2)
                n += 1
                late = rng.random() < 0.08
                child = rng.random() < 0.3
                events.append(
                    turn(
                        n,
                        clock - (rng.uniform(1, 20) if late else 0),
                        *(("worker", "driver") if child else ()),
                    )
                )
            for _ in range(rng.choice([1, 1, 1, 2])):
                clock += rng.uniform(0.1, 1)
                late = rng.random() < 0.07
                score = {"type": "score", "score": round(rng.gauss(0.5, 0.2), 3), "ts": at(clock)}
                if late:
                    score["ts"] = at(clock - rng.uniform(1, 20))
                events.append(score)
            rng.shuffle(events)
            push(project, "live", *events)
        elif op < 0.9:
            sub = rng.choice(subs)
            if sub.excluded_at is None:
                submissions.exclude_submission(sub, by=alice, reason="junk")
            else:
                submissions.include_submission(sub, by=alice)
        elif candidates := [s for s in subs if s.status == "candidate"]:
            sub = rng.choice(candidates)
            submissions.request_verification(sub, by=None, automatic=True)
            outcome = rng.choice(["passed", "failed"])
            submissions.record_verification(
                sub.pk, VerificationResult(outcome, 0 if outcome == "passed" else 1, "", outcome)
            )
        run = Run.objects.select_related("project__scenario").get(external_id="live")
        kept = timeline.run_timeline(run, now=T0 + timedelta(hours=4), scores_version=_scores_version(run))
        run = Run.objects.select_related("project__scenario").get(external_id="live")
        scratch = timeline.run_timeline(run, now=T0 + timedelta(hours=4))
        for name in ("scores", "score_standing", "score_turns", "frontier", "score_total", "start", "end"):
            assert getattr(kept, name) == getattr(scratch, name), name
        assert _figure(run, kept) == _figure(run, scratch)
    assert run.score_count > 4 * 6  # the stride doubled twice at least
    # Many steps were scores after the last one: extended, not read again (each step reads from scratch
    # once for the comparison; a doubled stride, a late score, an exclusion read the kept one again too).
    assert len(small) - steps < 0.75 * steps, len(small) - steps


def test_a_new_score_after_the_last_is_added_to_the_kept_side_not_read_again(project, monkeypatch):
    """400 scores (thinned in SQL to every 2nd): the next one costs no read of them all."""
    reads = []
    read = timeline_scores.score_side
    monkeypatch.setattr(timeline_scores, "score_side", lambda *a: reads.append(1) or read(*a))
    push(project, "live", {"type": "state", "state": "running", "ts": at(0)})
    events = [turn(i + 1, i / 10) for i in range(400)]
    events += [{"type": "score", "score": (i % 37) / 40, "ts": at(i / 10 + 0.05)} for i in range(400)]
    push(project, "live", *events)

    def timeline_now():
        run = Run.objects.select_related("project__scenario").get(external_id="live")
        return run, timeline.run_timeline(
            run, now=T0 + timedelta(hours=4), scores_version=_scores_version(run)
        )

    timeline_now()
    assert reads == [1]
    push(project, "live", turn(401, 40.1), {"type": "score", "score": 0.99, "ts": at(40.15)})
    run, kept = timeline_now()
    assert reads == [1]  # extended
    scratch = timeline.run_timeline(run, now=T0 + timedelta(hours=4))
    assert (kept.scores, kept.score_turns, kept.frontier) == (
        scratch.scores,
        scratch.score_turns,
        scratch.frontier,
    )
    assert kept.score_turns[-1] == (401, "driver") and kept.frontier[-1][1] == 0.99


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_no_progress_reading_advanced_by_the_turns_since_equals_one_read_from_scratch(
    project, monkeypatch, seed
):
    """The run page's "no progress" reading (turns, tokens, USD since the best score) is advanced by the
    turns past what it read while the best stays; late turns (before the best, or before the last read),
    a child actor's turns, a new best, a deleted turn: always what a read of every turn gives."""
    from smrweb.tracking.models import AgentTurn
    from smrweb.tracking.queries import progress, turn_memo

    reads = []  # the readings from the kept turn aggregates' buckets (not advanced by the turns since)
    read = turn_memo._turns_after
    monkeypatch.setattr(turn_memo, "_turns_after", lambda *a: reads.append(1) or read(*a))
    rng = random.Random(seed)
    push(project, "live", {"type": "state", "state": "running", "ts": at(0)})
    clock, n, steps = 1.0, 0, 60
    for step in range(steps):
        events = []
        for _ in range(rng.choice([1, 1, 2, 5])):
            clock += rng.uniform(0.2, 2)
            n += 1
            late = rng.random() < 0.15
            child = rng.random() < 0.3
            events.append(
                turn(n, clock - (rng.uniform(1, 30) if late else 0), *(("w", "driver") if child else ()))
            )
        if rng.random() < 0.15:
            events.append({"type": "score", "score": round(rng.random(), 3), "ts": at(clock)})
        push(project, "live", *events)
        if step % 20 == 19:  # a turn deleted (and the run's sums with it): they do not add up, read again
            turns = AgentTurn.objects.filter(run__external_id="live")
            rng.choice(list(turns)).delete()
            sums = turns.aggregate(n=Count("id"), tin=Sum("tokens_in"), tout=Sum("tokens_out"))
            Run.objects.filter(external_id="live").update(
                turn_count=sums["n"], tokens_in=sums["tin"], tokens_out=sums["tout"]
            )
        run = Run.objects.select_related("project__scenario").get(external_id="live")
        kept = progress.progress_since_best(run, kept=True)
        scratch = progress.progress_since_best(run)
        assert kept == replace(scratch, usd=scratch.usd.quantize(Decimal("0.000001"))), step
    assert 0 < len(reads) < steps / 2, len(reads)  # read at first and after a new best or a deletion


def test_one_runs_latest_scores_read_off_the_index_equal_the_window_over_many(project, alice):
    """The run page's stats read one run's latest scores without a window over all of them: the same
    points (standing included) as the runs table's read of several runs gives for it."""
    from smrweb.tracking import queries

    push(project, "a", *({"type": "score", "score": i / 10, "ts": at(i % 7 + i / 100)} for i in range(30)))
    push(project, "b", {"type": "score", "score": 0.3, "ts": at(1)})
    run = Run.objects.get(external_id="a")
    submissions.exclude_submission(
        Submission.objects.filter(run=run).order_by("-ts")[1], by=alice, reason="x"
    )
    both = queries.score_histories([run.pk, Run.objects.get(external_id="b").pk], per_run=6)
    with CaptureQueriesContext(connection) as read:
        alone = queries.score_histories([run.pk], per_run=6)
    assert "ROW_NUMBER" not in read.captured_queries[0]["sql"].upper()
    assert alone[run.pk] == both[run.pk] and len(alone[run.pk]) == 6
    assert any(p.why == "excluded" for p in alone[run.pk])


def _poll_after_a_turn_and_a_score(client, project, run_id: str, n: int, minutes: float) -> list[str]:
    """The queries of a run page's cards poll after one new turn and one new best score (the page shown
    first): the same cards change on a short run and a long one."""
    url = f"/projects/hill/runs/{run_id}/"
    shown = dict(
        re.findall(r'data-card="([^"]+)"\s+data-version="([^"]*)"', client.get(url).content.decode())
    )
    headers = {"HX-Request": "true", live.CARDS_HEADER: live.cards_header(shown)}
    assert client.get(url, headers=headers).status_code == 204
    push(
        project,
        run_id,
        turn(n, minutes),
        {"type": "score", "score": 0.95 + n % 10 / 100, "ts": at(minutes + 0.01)},
    )
    with CaptureQueriesContext(connection) as read:
        assert client.get(url, headers=headers).status_code == 200
    return [q["sql"] for q in read.captured_queries]


def test_a_poll_after_a_turn_and_a_score_reads_as_many_rows_whatever_the_runs_length(client_alice, project):
    """Ten turns and three scores, or 3,000 turns and 400 scores (the timeline's scores thinned in SQL):
    as many queries once both show the same cards, and none of them a window over the run's scores."""
    push(project, "short", *(turn(i, i / 10) for i in range(10)))
    push(project, "short", *({"type": "score", "score": i / 10, "ts": at(i / 5 + 0.05)} for i in range(3)))
    long = [turn(i, i / 100) for i in range(3000)]
    long += [{"type": "score", "score": (i % 37) / 40, "ts": at(i * 0.075 + 0.001)} for i in range(400)]
    push(project, "long", *long[:2500])
    push(project, "long", *long[2500:])
    counts = {}
    for run_id, start in (("short", 2.0), ("long", 31.0)):
        for k in range(2):
            sql = _poll_after_a_turn_and_a_score(client_alice, project, run_id, 5000 + k, start + k)
            counts[run_id, k] = len(sql)
            if run_id == "long":
                assert not [q for q in sql if "ROW_NUMBER" in q.upper()], "a window over every score"
    # (The long run's first new best also takes its "no progress" badge away: its head reads more.)
    assert counts["long", 1] == counts["short", 1] == counts["short", 0], counts
