"""The runs table's sparklines kept under each run's submissions' marker (queries.kept_score_histories): a
poll after a turn reads them from the cache, and every change to a run's scores (a new one, an exclusion, a
deletion) moves the marker, so what is kept always equals the scores read now."""

from __future__ import annotations

import random

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from smrweb.tracking import queries
from smrweb.tracking.models import Run, Submission
from smrweb.tracking.queries import markers
from smrweb.tracking.services import submissions
from tests.factories import push

pytestmark = pytest.mark.django_db


def kept_now(run_ids: list[int]) -> dict:
    marks = markers.submission_markers(run_ids)
    return queries.kept_score_histories({pk: marks.get(pk, markers.NO_SUBMISSIONS) for pk in run_ids})


def test_kept_histories_follow_every_change_to_the_scores(project, alice):
    rng = random.Random(36)
    for name in ("a", "b", "c"):
        push(project, name, *({"type": "score", "score": rng.random()} for _ in range(5)))
    push(project, "quiet", {"type": "agent.turn", "turn": 1, "actor": "driver"})  # no scores at all
    ids = list(Run.objects.filter(project=project).values_list("pk", flat=True))
    for step in range(12):
        change = rng.choice(["score", "exclude", "delete", "turn"])
        run = Run.objects.get(pk=rng.choice(ids))
        if change == "score":
            push(project, run.external_id, {"type": "score", "score": rng.random()})
        elif change == "exclude" and (sub := run.submissions.filter(excluded_at__isnull=True).first()):
            submissions.exclude_submission(sub, by=alice, reason="junk")
        elif change == "delete" and (sub := run.submissions.order_by("?").first()):
            Submission.objects.filter(pk=sub.pk).delete()
        else:
            push(project, run.external_id, {"type": "agent.turn", "turn": 100 + step, "actor": "driver"})
        read_now = queries.score_histories(ids)
        fresh = {pk: read_now.get(pk, []) for pk in ids}
        assert kept_now(ids) == fresh, (step, change)
        with CaptureQueriesContext(connection) as read:
            assert kept_now(ids) == fresh
        assert len(read) == 1  # the markers: the sparklines came from the cache
        # The same markers read with the runs themselves (a poll's changed rows): equal, none missing.
        with_runs = markers.with_submission_markers(Run.objects.filter(pk__in=ids))
        grouped = markers.submission_markers(ids)
        assert {r.pk: markers.marker_of(r) for r in with_runs} == {
            pk: grouped.get(pk, markers.NO_SUBMISSIONS) for pk in ids
        }, (step, change)
