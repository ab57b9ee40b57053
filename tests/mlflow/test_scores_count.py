"""MLflow scores that can count (issue 33, P1-B): a score logged with the unchanged MLflow client names its
artifact — the file at the scenario's path by default, the run's `smrweb.artifact` tag when set, also when
the file is logged after the score — so a real worker verifies it like a pushed score and it counts in the
run's best. Before, the submission named no artifact and stayed a candidate ("cannot verify") forever."""

from __future__ import annotations

import pytest

from smrweb.tracking import services
from smrweb.tracking.models import Submission
from smrweb.tracking.queries.projects import counted_leaderboard
from tests.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

CHECK = "import sys; sys.exit(0 if open(sys.argv[1], 'rb').read().startswith(b'ok') else 1)"


@pytest.fixture
def arena(project, alice):
    """The project's scenario scores `val_loss` (lower is better), declares `model/policy.txt` as its
    artifact and checks it with a validator; the project verifies every score, as the demo's do."""
    scenario = project.scenario
    scenario.score_metric = "val_loss"
    scenario.direction = "minimize"
    scenario.artifact_path = "model/policy.txt"
    scenario.validator_command = ["python3", "-c", CHECK, "{artifact}"]
    scenario.save()
    services.update_project(project, auto_verify=True, by=alice)
    return project


def _verified(run_id: str) -> Submission:
    def done():
        sub = Submission.objects.select_related("artifact", "project").get(run__external_id=run_id)
        return sub if sub.status == "verified" else None

    return wait_for(done, timeout=60)


def _counts(sub: Submission) -> bool:
    """In the project's verified best and on its leaderboard (what P1-B found it never reached)."""
    return sub in counted_leaderboard(sub.project)


def _policy(tmp_path, body: bytes = b"ok: weights\n"):
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "policy.txt").write_bytes(body)
    return model / "policy.txt"


def test_a_score_logged_with_mlflow_takes_the_file_at_the_scenarios_path_and_verifies(
    tracking, arena, tmp_path, celery_worker
):
    mlflow = tracking
    mlflow.set_experiment("hill")
    policy = _policy(tmp_path)
    with mlflow.start_run() as active:
        mlflow.log_artifact(str(policy), artifact_path="model")
        mlflow.log_metric("val_loss", 3.05)
    sub = _verified(active.info.run_id)
    assert sub.artifact_ref == "model/policy.txt" and sub.artifact.path == "model/policy.txt"
    assert sub.verification_outcome == "passed"
    assert _counts(sub)


def test_the_file_may_come_after_the_score(tracking, arena, tmp_path, celery_worker):
    """The MLflow client often logs the metric first: the score waits for its file (auto-verify does not
    give up on it) and is verified once the file arrives."""
    mlflow = tracking
    mlflow.set_experiment("hill")
    policy = _policy(tmp_path)
    with mlflow.start_run() as active:
        mlflow.log_metric("val_loss", 2.5)
        sub = Submission.objects.get(run__external_id=active.info.run_id)
        assert sub.artifact_ref == "model/policy.txt" and sub.artifact_id is None
        mlflow.log_artifact(str(policy), artifact_path="model")
    sub = _verified(active.info.run_id)
    assert sub.artifact.path == "model/policy.txt"
    assert [t.to_status for t in sub.transitions.all()] == ["verifying", "verified"]  # no "cannot verify"
    assert _counts(sub)


def test_the_smrweb_artifact_tag_names_another_file(tracking, arena, tmp_path, celery_worker):
    mlflow = tracking
    mlflow.set_experiment("hill")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "best.bin").write_bytes(b"ok: the tagged file\n")
    decoy = _policy(tmp_path, b"not this one\n")  # at the scenario's path: the tag wins
    with mlflow.start_run(tags={"smrweb.artifact": "ckpt/best.bin"}) as active:
        mlflow.log_artifact(str(decoy), artifact_path="model")
        mlflow.log_metric("val_loss", 1.75)
        mlflow.log_artifact(str(tmp_path / "ckpt" / "best.bin"), artifact_path="ckpt")
    sub = _verified(active.info.run_id)
    assert sub.artifact_ref == "ckpt/best.bin" and sub.artifact.path == "ckpt/best.bin"
    assert _counts(sub)


def test_a_tag_set_after_the_score_names_its_artifact(tracking, arena, tmp_path, celery_worker):
    mlflow = tracking
    arena.scenario.artifact_path = ""  # nothing by default: the score waits for a name
    arena.scenario.save()
    mlflow.set_experiment("hill")
    (tmp_path / "out.bin").write_bytes(b"ok: named late\n")
    with mlflow.start_run() as active:
        mlflow.log_metric("val_loss", 0.5)
        mlflow.log_artifact(str(tmp_path / "out.bin"))
        mlflow.set_tag("smrweb.artifact", "out.bin")
    sub = _verified(active.info.run_id)
    assert sub.artifact_ref == "out.bin" and sub.artifact.path == "out.bin"


def test_an_artifact_tag_that_is_no_path_is_refused(tracking, arena):
    from mlflow.exceptions import MlflowException

    mlflow = tracking
    mlflow.set_experiment("hill")
    with mlflow.start_run():
        with pytest.raises(MlflowException) as refused:
            mlflow.set_tag("smrweb.artifact", "model\\policy.txt")
    assert refused.value.error_code == "INVALID_PARAMETER_VALUE" and "smrweb.artifact" in str(refused.value)
