"""The signed-webhook protocol: what smrweb POSTs to a push project's harness (at `Project.webhook_url`)
and to an alert rule's webhook. Canonical JSON (sorted keys, no spaces), signed with HMAC-SHA256 over
`<timestamp>.<body>` (`core.outbound.signed_headers`), an Idempotency-Key that stays the same across the
retries of one action, and a User-Agent per kind. The payloads, by `type`: `smrweb.rollback`,
`smrweb.stop`, `smrweb.start`, `smrweb.message`, `smrweb.pause`, `smrweb.resume` (and `smrweb.alert`,
built by `outbound.alerts` and signed with the rule's own secret)."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from django.conf import settings
from django.utils import timezone

from smrweb.core import outbound
from smrweb.tracking.models import ControlKind, Rollback, Run, RunControl, RunLaunch

Request = tuple[bytes, dict[str, str]]  # the body and headers of one POST


def webhook_secret(project) -> str:
    """The key a receiver checks signatures with: derived from SECRET_KEY per project (shown to admins).
    The derivation's label names rollbacks, the first action; changing it would change every secret."""
    return hmac.new(
        settings.SECRET_KEY.encode(), f"smrweb.rollback-webhook:{project.pk}".encode(), hashlib.sha256
    ).hexdigest()


def signed(secret: str, payload: dict, *, key: str, agent: str, now=None) -> Request:
    """Any signed POST: canonical JSON, signed with `secret` at `now`."""
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    now = now or timezone.now()
    headers = outbound.signed_headers(
        secret, body, timestamp=int(now.timestamp()), idempotency_key=key, agent=agent
    )
    return body, headers


def _to_harness(project, payload: dict, *, key: str, agent: str, now) -> Request:
    return signed(webhook_secret(project), payload, key=key, agent=agent, now=now)


def rollback_request(rollback: Rollback, *, now=None) -> Request:
    """`smrweb.rollback`: restore a submission's artifact or a checkpoint. The signature covers timestamp
    and body, so a receiver can refuse replays; the Idempotency-Key lets it ignore a retried delivery."""
    run = rollback.run
    target: dict[str, Any]
    if rollback.target_submission_id:
        sub = rollback.target_submission
        artifact = sub.artifact
        target = {
            "type": "submission",
            "id": sub.pk,
            "score": sub.score,
            "commit": sub.commit,
            "artifact_path": artifact.path if artifact else None,
            "artifact_sha256": artifact.blob.sha256 if artifact else None,
            "ts": sub.ts.isoformat(),
        }
    else:
        cp = rollback.target_checkpoint
        target = {
            "type": "checkpoint",
            "id": cp.external_id,
            "label": cp.label,
            "commit": cp.commit,
            "ts": cp.ts.isoformat(),
        }
    payload = {
        "type": "smrweb.rollback",
        "rollback_id": rollback.pk,
        "project": run.project.slug,
        "run": run.external_id,
        "target": target,
        "reason": rollback.reason,
        "requested_by": rollback.requested_by.get_username(),
        "requested_at": rollback.created.isoformat(),
    }
    return _to_harness(
        run.project, payload, key=f"smrweb-rollback-{rollback.pk}", agent="smrweb-rollback/1", now=now
    )


def stop_request(run: Run, *, reason: str, now=None) -> Request:
    """`smrweb.stop`: the budget guard's (or a person's) way to stop a push project's harness."""
    now = now or timezone.now()
    payload = {
        "type": "smrweb.stop",
        "project": run.project.slug,
        "run": run.external_id,
        "reason": reason,
        "requested_at": now.isoformat(),
    }
    return _to_harness(run.project, payload, key=f"smrweb-stop-{run.pk}", agent="smrweb-stop/1", now=now)


def start_request(launch: RunLaunch, *, now=None) -> Request:
    """`smrweb.start`: start the next run under the id smrweb chose. The Idempotency-Key is the launch's
    own key, so a retried delivery starts nothing twice."""
    project = launch.project
    payload = {
        "type": "smrweb.start",
        "launch_id": launch.pk,
        "project": project.slug,
        "run_id": launch.external_run_id,
        "from_run": launch.from_run.external_id if launch.from_run_id else None,
        "kickoff": launch.kickoff,
        "model_profile": launch.model_profile,
        "budget": {
            "usd": str(launch.budget_usd) if launch.budget_usd is not None else None,
            "tokens": launch.budget_tokens,
        },
        "scenario": project.scenario.key,
        "requested_by": launch.requested_by.get_username(),
        "requested_at": launch.created.isoformat(),
    }
    return _to_harness(project, payload, key=launch.idempotency_key, agent="smrweb-start/1", now=now)


def control_request(control: RunControl, *, now=None) -> Request:
    """`smrweb.message`, `smrweb.pause` or `smrweb.resume`, with the control's Idempotency-Key on every
    retry. A harness reports a message back as a `message` event whose `id` is `message_id`, a pause as
    a `state` event `paused`, a resume as a `state` event `running`."""
    run = control.run
    payload: dict[str, Any] = {
        "type": f"smrweb.{control.kind}",
        "control_id": control.pk,
        "project": run.project.slug,
        "run": run.external_id,
        "requested_by": control.by_label,
        **({"guard": control.guard} if control.guard else {}),
        "requested_at": control.created.isoformat(),
    }
    if control.kind == ControlKind.MESSAGE:
        payload.update(body=control.body, message_id=control.idempotency_key)
    return _to_harness(run.project, payload, key=control.idempotency_key, agent="smrweb-control/1", now=now)
