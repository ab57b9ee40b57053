"""Verifying a submission: run its scenario's validator against the artifact's bytes in the sandbox
(`core.sandbox`) and record the outcome (`services.submissions`). Called by the `verify_submission`
task; the task claims the submission, this does the work."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings

from smrweb.core import sandbox
from smrweb.sources.preflight import VALIDATORS_DIR
from smrweb.tracking import services
from smrweb.tracking.errors import ArtifactBytesMissing
from smrweb.tracking.models import Submission, VerificationOutcome
from smrweb.tracking.services import submissions


def confinement() -> sandbox.Confinement | None:
    """How validators are contained here: bubblewrap with the configured limits, or None when the operator
    chose SMRWEB_SANDBOX=unconfined (finding 4)."""
    if settings.SMRWEB_SANDBOX == "unconfined":
        return None
    return sandbox.confinement_from(settings, readonly=(str(VALIDATORS_DIR),))


def verify(sub: Submission, progress: Callable[[str], None]) -> str:
    """Run the validator (or record why it cannot run) and store the result; the outcome, or
    "already recorded" when another delivery stored one first. Checked once more when its artifact was
    linked while it was checked without one."""
    try:
        return _verify_once(sub, progress)
    except submissions.BytesArrivedMeanwhile:
        sub = Submission.objects.select_related("project__scenario", "artifact__blob").get(pk=sub.pk)
        return _verify_once(sub, progress)


def _verify_once(sub: Submission, progress: Callable[[str], None]) -> str:
    result = submissions.cannot_verify(sub)
    if result is None:
        try:
            # The bytes are copied into the sandbox's own directory (from a file or an S3 object alike).
            with services.open_blob(sub.artifact.blob) as fh:
                ran = sandbox.run_validator(
                    list(sub.project.scenario.validator_command),
                    fh,
                    artifact_name=sub.artifact.path,
                    timeout=settings.SMRWEB_VALIDATOR_TIMEOUT_SECONDS,
                    extra_placeholders={"validators": str(VALIDATORS_DIR)},
                    on_progress=progress,
                    confinement=confinement(),
                )
        except ArtifactBytesMissing as exc:
            result = submissions.VerificationResult(VerificationOutcome.CANNOT_VERIFY, None, "", exc.message)
        else:
            result = submissions.VerificationResult(ran.outcome, ran.exit_code, ran.output_tail, ran.detail)
    stored = submissions.record_verification(sub.pk, result, checked_without_bytes=sub.artifact_id is None)
    return result.outcome if stored else "already recorded"
