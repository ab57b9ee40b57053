"""What a submission's reproducibility bundle says about it (the manifest's facts), in at most four
queries: the submission with its project, scenario, run and artifact; its run's launch; its run's kickoff
message (and its first message when none is marked as the kickoff).

The files, the validator scripts and the signature are added by `sources.bundles`, which writes the
bundle in the one format of `core.bundles`."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime

from smrweb.tracking.errors import NoBundle
from smrweb.tracking.models import RunLaunch, RuntimeMessage, Submission
from smrweb.tracking.queries.runs import KICKOFF_TOPIC

# What a scenario's definition is, for its version digest: what decides whether and how a score counts.
SCENARIO_DEFINITION = (
    "key",
    "harness_id",
    "artifact_path",
    "artifact_kind",
    "score_metric",
    "direction",
    "score_min",
    "score_max",
    "validator_command",
    "scoring_command",
    "required_toolchains",
)


def _when(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def bundled_submission(project, submission_id: int) -> Submission:
    """The submission of `project` with what its bundle reads; Submission.DoesNotExist when there is none,
    NoBundle when it has no artifact bytes to re-score."""
    sub = Submission.objects.select_related("project__scenario", "run", "artifact__blob").get(
        project=project, pk=submission_id
    )
    if sub.artifact is None:
        raise NoBundle(
            "This submission has no stored artifact"
            + (f" (its score names {sub.artifact_ref}, not uploaded yet)" if sub.artifact_ref else "")
            + ": there is nothing to re-score, so no bundle is made."
        )
    return sub


def scenario_version(scenario) -> dict:
    """A scenario's version: when it last changed, and the sha256 of its definition (SCENARIO_DEFINITION)."""
    definition = {name: getattr(scenario, name) for name in SCENARIO_DEFINITION}
    digest = hashlib.sha256(json.dumps(definition, sort_keys=True, allow_nan=False).encode()).hexdigest()
    return {"updated": _when(scenario.updated), "definition_sha256": digest}


def bundle_facts(sub: Submission) -> tuple[dict, str]:
    """The manifest's description of `sub` (from `bundled_submission`), JSON-ready, and its run's kickoff
    text (a file of the bundle: the launch's kickoff, else the kickoff message, else the first message)."""
    project, run, scenario, artifact = sub.project, sub.run, sub.project.scenario, sub.artifact
    launch = RunLaunch.objects.filter(run=run).values("kickoff", "model_profile").first()
    if launch and launch["kickoff"]:
        text, source = launch["kickoff"], "launch"
    else:
        text, source = _kickoff_message(run)
    return {
        "project": {"id": project.pk, "slug": project.slug, "name": project.name},
        "run": {
            "id": run.pk,
            "external_id": run.external_id,
            "display_name": run.display_name,
            "state": run.state,
            "started_at": _when(run.started_at),
            "git_branch": run.git_branch,
            "git_commit": run.git_commit,
        },
        "submission": {
            "id": sub.pk,
            "event_id": sub.event_id,
            "harness_id": sub.harness_id,
            "score": sub.score,
            "status": sub.status,
            "commit": sub.commit,
            "details": sub.details,
            "ts": _when(sub.ts),
            "created": _when(sub.created),
        },
        "claimed_score": sub.score,
        "commit": sub.commit or run.git_commit,
        "kickoff": {"source": source, "chars": len(text)},
        "model_profile": {
            "requested": run.requested_profile,
            "actual": run.actual_profile,
            "launch": (launch or {}).get("model_profile", ""),
            "actors": run.actor_profiles or [],
        },
        "scenario": {
            "key": scenario.key,
            "name": scenario.name,
            "version": scenario_version(scenario),
            "score_metric": scenario.score_metric,
            "direction": scenario.direction,
            "score_min": scenario.score_min,
            "score_max": scenario.score_max,
            # No scenario states a tolerance yet: a re-run's score must then equal the claimed one.
            "score_tolerance": None,
            "artifact_path": scenario.artifact_path,
            "artifact_kind": scenario.artifact_kind,
            "required_toolchains": scenario.required_toolchains,
        },
        "artifact": {
            "path": artifact.path,
            "sha256": artifact.blob.sha256,
            "size": artifact.blob.size,
            "content_type": artifact.content_type,
            "commit": artifact.commit,
        },
        "verification": {
            "outcome": sub.verification_outcome,
            "exit_code": sub.verification_exit_code,
            "verified_at": _when(sub.verified_at),
        },
    }, text


def _kickoff_message(run) -> tuple[str, str]:
    """The run's kickoff message (by its topic), else its first runtime message; ("", "") when it has none."""
    said = RuntimeMessage.objects.filter(run=run).order_by("seq").values_list("body", flat=True)
    body = said.filter(topic__iexact=KICKOFF_TOPIC).first()
    if body is not None:
        return body, "kickoff message"
    first = said.first()
    return (first, "first runtime message") if first is not None else ("", "")
