"""Issue 36, item 2: the project chart assembled from per-run pieces kept under each run's own version.
The kept assembly equals a from-scratch read after random sequences of new scores (late ones too),
verifications and exclusions; one new score re-reads that one run; the frontier is extended when only
later records arrived; the chart's poll answers 204 when nothing it draws changed."""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from smrweb.dashboard.live import VERSION_HEADER
from smrweb.tracking.models import Direction, Run, Submission
from smrweb.tracking.queries import project_chart
from smrweb.tracking.queries.summary_reference import project_scores
from smrweb.tracking.services import submissions
from smrweb.tracking.services.submissions import VerificationResult
from tests.factories import push

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def score(value, minutes):
    return {"type": "score", "score": value, "ts": (T0 + timedelta(minutes=minutes)).isoformat()}


def turn(n, minutes):
    return {
        "type": "agent.turn",
        "turn": n,
        "actor": "driver",
        "tokens_in": 10,
        "tokens_out": 1,
        "cost_usd": 0.001,
        "ts": (T0 + timedelta(minutes=minutes)).isoformat(),
    }


def same(kept, scratch) -> None:
    """Point for point: every field of `ProjectScores` the chart reads."""
    assert kept.runs == scratch.runs
    assert kept.matching == scratch.matching
    assert kept.total == scratch.total
    assert (kept.start, kept.end) == (scratch.start, scratch.end)
    assert kept.frontier == scratch.frontier
    assert {pk: list(s) for pk, s in kept.series.items()} == {pk: list(s) for pk, s in scratch.series.items()}
    assert kept.void == scratch.void


def _verify(sub: Submission, passed: bool) -> None:
    submissions.request_verification(sub, by=None, automatic=True)
    outcome = "passed" if passed else "failed"
    submissions.record_verification(sub.pk, VerificationResult(outcome, 0 if passed else 1, "", outcome))


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_kept_chart_equals_a_chart_read_from_scratch_after_random_changes(project, alice, seed):
    rng = random.Random(seed)
    maximize = seed % 2 == 1
    project.scenario.direction = Direction.MAXIMIZE if maximize else Direction.MINIMIZE
    project.scenario.save()
    names = [f"r{i}" for i in range(8)]
    clock = {name: 0.0 for name in names}
    subset = names[:5]
    checked = 0
    for _ in range(45):
        op = rng.random()
        live_subs = list(Submission.objects.filter(project=project).select_related("run"))
        if op < 0.55 or not live_subs:
            name = rng.choice(names)
            events = []
            for _ in range(rng.choice([1, 1, 2, 8, 25])):
                # Mostly later than the run's last score; now and then an earlier one arriving late.
                late = rng.random() < 0.1
                clock[name] += rng.uniform(0.5, 3)
                minutes = clock[name] - (rng.uniform(5, 30) if late else 0)
                events.append(score(round(rng.gauss(0.5, 0.2), 3), minutes))
            push(project, name, *events)
        elif op < 0.75:
            candidates = [s for s in live_subs if s.status in ("candidate",)]
            if candidates:
                _verify(rng.choice(candidates), passed=rng.random() < 0.7)
        elif op < 0.85:
            sub = rng.choice(live_subs)
            if sub.excluded_at is None:
                submissions.exclude_submission(sub, by=alice, reason="junk")
            else:
                submissions.include_submission(sub, by=alice)
        else:
            run = Run.objects.get(pk=rng.choice(live_subs).run_id)
            if run.excluded_at is None:
                submissions.exclude_run(run, by=alice, reason="a test run")
            else:
                submissions.include_run(run, by=alice)
        project.refresh_from_db()
        for unverified in (False, True):
            for runs in (None, Run.objects.filter(project=project, external_id__in=subset)):
                # Small resolutions, so that thinning in SQL and downsampling both happen.
                args = dict(unverified=unverified, runs=runs, max_points=30, lines=6)
                kept = project_chart.kept_project_scores(project, **args)
                same(kept.scores, project_scores(project, **args))
                checked += 1
    assert checked == 45 * 4
    assert Submission.objects.filter(project=project).count() > 4 * 30  # thinned in SQL at some point


def _twelve_runs(project):
    for i in range(12):
        push(project, f"r{i:02d}", *(score(0.1 + i / 100 + k / 1000, i + k) for k in range(20)))


def _submission_reads(queries) -> list[str]:
    """The reads of submission rows, not the drawn runs' markers (a grouped count, top id, latest update)."""
    return [q["sql"] for q in queries if "tracking_submission" in q["sql"] and not _is_markers(q["sql"])]


def _is_markers(sql: str) -> bool:
    return 'MAX("tracking_submission"."updated")' in sql and "GROUP BY" in sql


def test_one_new_score_re_reads_only_its_runs_rows(project):
    _twelve_runs(project)
    project_chart.kept_project_scores(project, unverified=True)
    push(project, "r05", score(0.9, 60))
    r05, r06 = Run.objects.get(external_id="r05"), Run.objects.get(external_id="r06")
    with CaptureQueriesContext(connection) as seen:
        kept = project_chart.kept_project_scores(project, unverified=True)
    same(kept.scores, project_scores(project, unverified=True))
    reads = _submission_reads(seen.captured_queries)
    assert len(reads) == 3  # span, rows, records: of r05 alone
    for sql in reads:
        assert re.search(rf"IN \({r05.pk}\)", sql), sql
        assert not re.search(rf"IN \([^)]*\b{r06.pk}\b", sql), sql
    assert len(seen.captured_queries) == 6  # with the drawn runs, how many match and their markers
    # Nothing changed: no score is read at all.
    with CaptureQueriesContext(connection) as seen:
        project_chart.kept_project_scores(project, unverified=True)
    assert _submission_reads(seen.captured_queries) == [] and len(seen.captured_queries) == 3


def test_a_new_turn_in_a_drawn_run_reads_no_score(project):
    """Issue 36, item 5: a turn moves its run (`Run.updated`) but not what the chart draws, so the chart's
    poll finds its pieces kept (by the runs' submissions markers) and reads no score to answer 204."""
    _twelve_runs(project)
    before = project_chart.kept_project_scores(project, unverified=True)
    push(project, "r05", turn(1, 61))
    with CaptureQueriesContext(connection) as seen:
        kept = project_chart.kept_project_scores(project, unverified=True)
    assert _submission_reads(seen.captured_queries) == []
    assert sum(_is_markers(q["sql"]) for q in seen.captured_queries) == 1
    assert kept.version == before.version
    same(kept.scores, project_scores(project, unverified=True))


def test_the_frontier_is_extended_by_later_records_and_rebuilt_when_a_score_stops_counting(
    project, alice, monkeypatch
):
    _twelve_runs(project)
    project_chart.kept_project_scores(project, unverified=True)
    merged = []
    real = project_chart.merged_frontier
    monkeypatch.setattr(
        project_chart, "merged_frontier", lambda records, m: merged.append(records) or real(records, m)
    )
    push(project, "r03", score(0.95, 80))
    kept = project_chart.kept_project_scores(project, unverified=True)
    r03 = Run.objects.get(external_id="r03")
    # Only the new record was merged onto the kept frontier.
    assert [{pk: len(rs) for pk, rs in m.items() if rs} for m in merged] == [{r03.pk: 1}]
    assert kept.scores.frontier[-1][1] == 0.95
    same(kept.scores, project_scores(project, unverified=True))
    # The record is excluded: not a prefix of what was merged any more, so every run's records are merged.
    merged.clear()
    submissions.exclude_submission(Submission.objects.get(score=0.95), by=alice, reason="junk")
    kept = project_chart.kept_project_scores(project, unverified=True)
    assert len(merged) == 1 and len(merged[0]) == 12
    assert kept.scores.frontier[-1][1] != 0.95
    same(kept.scores, project_scores(project, unverified=True))
    # A score earlier than the last record merged: rebuilt as well.
    merged.clear()
    push(project, "r04", score(0.97, 1))
    kept = project_chart.kept_project_scores(project, unverified=True)
    assert len(merged) == 1 and len(merged[0]) == 12
    same(kept.scores, project_scores(project, unverified=True))


def _chart_version(body: str) -> str:
    return re.search(r'id="project-chart".*?"X-Smrweb-Version": "([^"]+)"', body, re.S)[1]


def test_the_chart_poll_is_unchanged_by_what_the_chart_does_not_draw(client_alice, project):
    for i in range(14):  # two more runs than the chart draws
        push(project, f"r{i:02d}", score(0.1 + i / 100, i), turn(0, i))
    version = _chart_version(client_alice.get("/projects/hill/").content.decode())
    poll = {"HX-Request": "true", VERSION_HEADER: version}
    url = "/projects/hill/chart/"
    assert client_alice.get(url, headers=poll).status_code == 204
    # A new turn (the chart draws no turn), and a score in a run the chart does not draw (r00 has the
    # lowest best): the runs table's version moves, the chart's does not.
    push(project, "r13", turn(1, 30))
    push(project, "r00", score(0.05, 31))
    assert client_alice.get(url, headers=poll).status_code == 204
    # A new score in a drawn run: drawn at once.
    push(project, "r13", score(0.99, 32))
    answer = client_alice.get(url, headers=poll)
    assert answer.status_code == 200 and "0.99" in answer.content.decode()


# --- Compare -------------------------------------------------------------------------------------------


def _compare_after_one_score(client_alice, project, n: int) -> tuple[list[str], Run, Run]:
    ids = [f"c{i:03d}" for i in range(n)]
    for i, rid in enumerate(ids):
        push(project, rid, score(0.1 + i / 1000, i % 50), turn(0, i % 50 + 1), score(0.2 + i / 1000, 60))
    url = "/projects/hill/compare/?" + "&".join(f"runs={rid}" for rid in ids)
    assert client_alice.get(url).status_code == 200
    changed, other = Run.objects.get(external_id=ids[n // 2]), Run.objects.get(external_id=ids[n // 2 + 1])
    push(project, changed.external_id, score(0.99, 70))
    with CaptureQueriesContext(connection) as seen:
        body = client_alice.get(url).content.decode()
    assert "0.99" in body  # drawn at once
    return [q["sql"] for q in seen.captured_queries], changed, other


def test_one_new_score_in_one_of_200_compared_runs_reads_that_run_alone(client_alice, project):
    few, *_ = _compare_after_one_score(client_alice, project, 20)
    Run.objects.filter(project=project).delete()
    many, changed, other = _compare_after_one_score(client_alice, project, 200)
    tracking = [[sql for sql in queries if "tracking_" in sql] for queries in (few, many)]
    assert len(tracking[1]) == len(tracking[0])  # flat (the viewer's session and clock aside)
    # The compared runs' markers are the one query that names every run; each other one (the run's row,
    # its turn statistics, scores and spend) names the changed run alone.
    markers = [sql for sql in many if re.search(r"external_id\" IN \(", sql)]
    assert len(markers) == 1 and '"tracking_run"."updated"' in markers[0]
    reads = [sql for sql in many if re.search(r'(run_id"|"id") IN \(', sql) and sql not in markers]
    assert len(reads) == 1, reads  # the run (with its parent)
    for sql in reads:
        assert re.search(rf"IN \({changed.pk}\)", sql), sql
        assert not re.search(rf"IN \([^)]*\b{other.pk}\b", sql), sql
    # Its turn and score sides are kept and advanced by the rows past them: one read each, naming the run
    # alone.
    [turns] = [sql for sql in many if "tracking_agentturn" in sql]
    assert re.search(rf'"run_id" = {changed.pk}\b', turns) and not re.search(rf"\b{other.pk}\b", turns), turns
    [scores] = [sql for sql in many if "tracking_submission" in sql and "tracking_notification" not in sql]
    assert re.search(rf'"run_id" = {changed.pk}\b', scores) and not re.search(rf"\b{other.pk}\b", scores)
    assert "OVER" not in scores, scores  # no window over every score of the run
