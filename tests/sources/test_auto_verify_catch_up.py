"""Switching auto-verify on catches up (issue 33, P2-5): the candidates already waiting are verified on
a real Celery worker too, queued in rate-limited chunks, with progress on the settings page."""

from __future__ import annotations

import io
import json

import pytest

from smrweb import tasks
from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import Project, Submission, SubmissionTransition
from smrweb.tracking.services import submissions as lifecycle
from tests.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

CHECK = "import sys; sys.exit(0 if open(sys.argv[1], 'rb').read().startswith(b'ok') else 1)"


def candidates(project, n: int) -> list[Submission]:
    for i in range(n):
        artifact, _ = services.store_artifact(
            project, f"r{i % 2}", path="submission/optimizer.py", content=io.BytesIO(b"ok %d" % i)
        )
        services.ingest_events(
            project,
            f"r{i % 2}",
            parse_events(json.dumps([{"type": "score", "score": i, "artifact": artifact.blob.sha256}])),
        )
    return list(Submission.objects.filter(project=project).order_by("id"))


@pytest.fixture
def validated(project):
    project.scenario.validator_command = ["python3", "-c", CHECK, "{artifact}"]
    project.scenario.save()
    return project


def test_switching_auto_verify_on_verifies_the_waiting_candidates(client, alice, validated, celery_worker):
    subs = candidates(validated, 4)  # waiting while auto-verify was off: nothing verifies them
    client.force_login(alice)
    page = client.get("/projects/hill/settings/").content.decode()
    assert "data-catch-up" not in page
    answer = client.post("/projects/hill/settings/", {"auto_verify": "on"})
    assert answer.status_code == 302
    wait_for(
        lambda: (
            set(Submission.objects.filter(pk__in=[s.pk for s in subs]).values_list("status", flat=True))
            == {"verified"}
        ),
        timeout=60,
    )
    assert "4 candidates already waiting are verified too" in str(list(answer.wsgi_request._messages))
    assert not Submission.objects.filter(pk__in=[s.pk for s in subs], proposed_by__isnull=False).exists()
    assert "data-catch-up" not in client.get("/projects/hill/settings/").content.decode()  # caught up


def test_the_catch_up_is_queued_in_chunks_at_the_configured_rate(alice, validated, celery_worker, settings):
    subs = candidates(validated, 5)
    # Switched on without the settings page's chain, to drive the chunks by hand: 2 a chunk, at the
    # worker's default 60 a minute, is one chunk every 2 seconds.
    Project.objects.filter(pk=validated.pk).update(auto_verify=True)
    validated.refresh_from_db()
    assert lifecycle.start_catch_up(validated, by=alice) == 5
    tasks.catch_up_verifications.delay(validated.pk, 2)
    wait_for(
        lambda: SubmissionTransition.objects.filter(submission__in=subs, to_status="verifying").count() == 5,
        timeout=60,
    )
    queued = list(
        SubmissionTransition.objects.filter(submission__in=subs, to_status="verifying")
        .order_by("created")
        .values_list("submission_id", "created")
    )
    assert [pk for pk, _ in queued] == [s.pk for s in subs]  # oldest first
    gaps = [(b - a).total_seconds() for (_, a), (_, b) in zip(queued, queued[1:])]
    # Within a chunk at once; between chunks the pause (2 s, generously bounded below).
    assert gaps[0] < 1 and gaps[2] < 1
    assert gaps[1] >= 1.5 and gaps[3] >= 1.5
    progress = lifecycle.catch_up_progress(validated)
    assert progress is None  # all five queued: nothing left to catch up
