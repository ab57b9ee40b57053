"""A score whose artifact is missing: the cannot-verify message says what is missing and how to fix it
(the walkthrough's P3: "the score named no artifact has not been uploaded"), auto-verify waits for a
named file instead of giving up, and the file's arrival attaches it and sends the run to verification."""

from __future__ import annotations

import io
import json

import pytest

from smrweb.tracking import services, signals
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import Submission, VerificationOutcome
from smrweb.tracking.services import submissions as lifecycle

pytestmark = pytest.mark.django_db


def scored(project, run="r1", **fields) -> Submission:
    event = {"type": "score", "score": 0.5, **fields}
    services.ingest_events(project, run, parse_events(json.dumps([event])))
    return Submission.objects.filter(project=project).order_by("-id").first()


@pytest.fixture
def validated(project):
    project.scenario.validator_command = ["true", "{artifact}"]
    project.scenario.artifact_path = "model/policy.onnx"
    project.scenario.save()
    return project


@pytest.fixture
def verify_signals():
    """The runs sent to auto-verification, heard in place of the worker's receiver (no broker here)."""
    from smrweb import tasks

    sent = []

    def receiver(sender, run_id, **kwargs):
        sent.append(run_id)

    signals.new_scores_to_verify.disconnect(dispatch_uid="smrweb-auto-verify")
    signals.new_scores_to_verify.connect(receiver, dispatch_uid="test-awaited")
    yield sent
    signals.new_scores_to_verify.disconnect(dispatch_uid="test-awaited")
    signals.new_scores_to_verify.connect(tasks.verify_new_scores, dispatch_uid="smrweb-auto-verify")


def detail(sub) -> str:
    found = lifecycle.cannot_verify(Submission.objects.select_related("project__scenario").get(pk=sub.pk))
    assert found is not None and found.outcome == VerificationOutcome.CANNOT_VERIFY
    return found.detail


def test_the_message_says_what_is_missing_and_how_to_fix_it(validated):
    pushed = detail(scored(validated))
    assert pushed == (
        "No artifact to check: the score names no file. Fix: send the score with `artifact` (the file's path "
        "in the run, or its sha256) and upload that file."
    )
    named = detail(scored(validated, "r2", artifact="model/policy.onnx"))
    assert named == (
        "No artifact to check: the score names `model/policy.onnx`, which run r2 has not uploaded. Fix: "
        "upload it (POST …/runs/r2/artifacts, or `smrweb report artifact`); the score takes it when it "
        "arrives, then verify again."
    )
    digest = detail(scored(validated, "r3", artifact="AB" * 32))
    assert f"names the file with sha256 {'ab' * 32}, which run r3 has not uploaded" in digest
    for text in (pushed, named, digest):
        assert "the score named no artifact has not been uploaded" not in text  # the old, garbled one


def test_an_mlflow_score_is_told_the_tag_and_the_scenarios_path(validated, alice):
    mlflow = detail(scored(validated, id="mlflow-score:0123"))
    assert mlflow == (
        "No artifact to check: the MLflow score names no file. Fix: log the file at the scenario's path "
        "`model/policy.onnx` (mlflow.log_artifact), or set the run's tag `smrweb.artifact` to the file's "
        "path in the run, before logging `score`."
    )
    validated.scenario.artifact_path = ""
    validated.scenario.save()
    pathless = detail(scored(validated, "r2", id="mlflow-score:4567"))
    assert "declares no artifact path: set the run's tag `smrweb.artifact` to the file's path" in pathless
    services.update_project(validated, auto_verify=True, by=alice)
    waiting = detail(scored(validated, "r3", id="mlflow-score:89ab", artifact="ckpt/best.bin"))
    assert waiting.endswith(
        "Fix: log it with mlflow.log_artifact at `ckpt/best.bin`; the score takes it when it arrives, then "
        "it is verified."
    )


def test_auto_verify_waits_for_a_named_file_and_its_upload_sends_the_run(
    validated, alice, verify_signals, django_capture_on_commit_callbacks
):
    services.update_project(validated, auto_verify=True, by=alice)
    nameless = scored(validated, "r1")
    waiting = scored(validated, "r1", artifact="model/policy.onnx")
    # The score that names nothing is tried (and comes back "cannot verify"); the named one waits.
    assert [s.pk for s in lifecycle.automatic_verifications(waiting.run_id)] == [nameless.pk]
    with django_capture_on_commit_callbacks(execute=True):
        services.store_artifact(validated, "r1", path="model/policy.onnx", content=io.BytesIO(b"onnx"))
    waiting.refresh_from_db()
    assert waiting.artifact.path == "model/policy.onnx"
    assert verify_signals == [waiting.run_id]  # the worker is asked, once the upload commits
    assert [s.pk for s in lifecycle.automatic_verifications(waiting.run_id)] == [waiting.pk]


def test_one_sent_to_verification_too_early_is_asked_again_when_the_file_arrives(validated, alice, bob):
    early = scored(validated, artifact="model/policy.onnx")
    lifecycle.request_verification(early, by=bob)
    lifecycle.record_verification(early.pk, lifecycle.cannot_verify(early))
    services.update_project(validated, auto_verify=True, by=alice)
    services.store_artifact(validated, "r1", path="model/policy.onnx", content=io.BytesIO(b"onnx"))
    early.refresh_from_db()
    assert early.artifact is not None and early.verification_outcome == ""
    assert [s.pk for s in lifecycle.automatic_verifications(early.run_id)] == [early.pk]


def test_a_late_name_attaches_the_waiting_scores_of_one_source(validated):
    mlflow = scored(validated, id="mlflow-score:1", artifact="model/policy.onnx")
    pushed = scored(validated, id="push-1")
    services.store_artifact(validated, "r1", path="out.bin", content=io.BytesIO(b"bytes"))
    renamed = services.name_awaited_artifact(mlflow.run, "out.bin", event_id_prefix="mlflow-score:")
    assert renamed == 1
    mlflow.refresh_from_db()
    pushed.refresh_from_db()
    assert (mlflow.artifact_ref, mlflow.artifact.path) == ("out.bin", "out.bin")
    assert (pushed.artifact_ref, pushed.artifact) == ("", None)  # another source's score: untouched


def _checked_while(sub: Submission, meanwhile) -> Submission:
    """The worker's check of `sub` (loaded before, without bytes) with `meanwhile` happening between its
    load and its result: what the CI run on PostgreSQL caught as a score left "cannot verify" for good."""
    from smrweb.sources import verification

    loaded = Submission.objects.select_related("project__scenario", "artifact__blob").get(pk=sub.pk)
    assert loaded.status == "verifying" and loaded.artifact is None
    real = lifecycle.cannot_verify

    def slow_cannot_verify(submission):
        found = real(submission)
        if submission.artifact is None:
            meanwhile()
        return found

    lifecycle.cannot_verify = slow_cannot_verify
    try:
        outcome = verification.verify(loaded, lambda line: None)
    finally:
        lifecycle.cannot_verify = real
    assert outcome == "passed"
    return Submission.objects.select_related("artifact").get(pk=sub.pk)


def test_a_file_uploaded_while_its_score_is_checked_without_it_is_checked(validated, bob):
    sub = scored(validated, artifact="model/policy.onnx")
    lifecycle.request_verification(sub, by=bob)
    done = _checked_while(
        sub,
        lambda: services.store_artifact(validated, "r1", path="model/policy.onnx", content=io.BytesIO(b"x")),
    )
    assert done.status == "verified" and done.artifact.path == "model/policy.onnx"
    assert [t.to_status for t in done.transitions.order_by("id")] == ["verifying", "verified"]


def test_a_late_name_while_the_score_is_checked_without_bytes_is_checked(validated, bob):
    validated.scenario.artifact_path = ""
    validated.scenario.save()
    sub = scored(validated, id="mlflow-score:1")
    services.store_artifact(validated, "r1", path="out.bin", content=io.BytesIO(b"bytes"))
    lifecycle.request_verification(sub, by=bob)
    done = _checked_while(
        sub, lambda: services.name_awaited_artifact(sub.run, "out.bin", event_id_prefix="mlflow-score:")
    )
    assert done.status == "verified" and (done.artifact_ref, done.artifact.path) == ("out.bin", "out.bin")
