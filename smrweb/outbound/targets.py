"""What each action calls, per source kind: the SMR connector (the SDK), the project's signed webhook,
or git. One function per (action, source) in `TARGETS`; a pair missing there is an action that source
cannot take. A target makes one call and records what the source took (`rollbacks.finish`,
`launches.record_accepted`, `control_accepted`); when the call fails it raises `http.Failed`, and the attempt
loop (`outbound.dispatch`) retries or gives up by the one rule."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings

from smrweb.outbound import http, webhooks
from smrweb.outbound.http import Attempt, Failed
from smrweb.sources.base import Malformed, RateLimited, ServerError, SourceError, TimedOut, Unreachable
from smrweb.sources.smr import connector_for
from smrweb.tracking import services
from smrweb.tracking.models import ControlKind, Rollback, RunControl, RunLaunch, SourceKind
from smrweb.tracking.services import launches, rollbacks

RETRYABLE_SOURCE_ERRORS = (RateLimited, ServerError, TimedOut, Unreachable)
# SMR answers a restore with `accepted` and an optional free-form `state`; only these say it is done.
SMR_RESTORE_DONE = frozenset({"applied", "restored", "completed", "succeeded", "done"})


def source_failed(exc: SourceError, *, retryable: bool | None = None) -> Failed:
    """A source's error (the SDK's, git's) as a failed attempt; its kind says whether to retry."""
    if retryable is None:
        retryable = isinstance(exc, RETRYABLE_SOURCE_ERRORS)
    return Failed(f"{exc.kind}: {exc}", retryable=retryable, hint=exc.retry_after)


def post_webhook(project, request: webhooks.Request) -> http.Sent:
    """The one signed-webhook POST of every action, to the project's webhook, with the webhook timeout."""
    body, headers = request
    return http.post(
        project.webhook_url,
        body,
        headers,
        timeout=settings.SMRWEB_DISPATCH_WEBHOOK_TIMEOUT,
        who="the webhook",
    )


# --- rollbacks ----------------------------------------------------------------------------------------


def rollback_via_smr(rollback: Rollback) -> Attempt:
    checkpoint = rollbacks.checkpoint_for(rollback)
    if checkpoint is None:
        rollbacks.finish(
            rollback.pk, ok=False, detail="No restorable checkpoint at or before this submission to restore."
        )
        return Attempt("failed")
    try:
        answer = connector_for(rollback.run.project).roll_back(
            rollback.run.external_id, checkpoint_id=checkpoint.external_id, reason=rollback.reason
        )
    except SourceError as exc:
        raise source_failed(exc) from None
    state = str(answer.get("state") or "") if isinstance(answer, dict) else ""
    done = state.lower() in SMR_RESTORE_DONE
    rollbacks.finish(
        rollback.pk,
        ok=True,
        accepted_only=not done,
        detail=f"SMR {'restored' if done else 'accepted the restore of'} checkpoint "
        f"{checkpoint.label or checkpoint.external_id}{f' (state {state})' if state else ''}.",
    )
    return Attempt("applied" if done else "accepted")


def rollback_via_webhook(rollback: Rollback) -> Attempt:
    """`smrweb.rollback`; 202 Accepted: the harness queued it; any other 2xx: it says the restore is done."""
    sent = post_webhook(rollback.run.project, webhooks.rollback_request(rollback)).taken()
    accepted_only = sent.status == 202
    rollbacks.finish(
        rollback.pk,
        ok=True,
        accepted_only=accepted_only,
        detail=f"attempt {rollback.attempts}: {sent.line}"
        + (" (queued, not confirmed)" if accepted_only else ""),
    )
    return Attempt("accepted" if accepted_only else "applied")


def rollback_via_git(rollback: Rollback) -> Attempt:
    """A new commit on the branch that restores the artifact path's bytes (sources/git/branches): history is
    never rewritten, and the next sync brings the commit in as a new artifact version."""
    from smrweb.sources.git import branches as git

    try:
        done = git.roll_back(rollback)
    except SourceError as exc:
        raise source_failed(exc) from None
    rollbacks.finish(rollback.pk, ok=True, detail=f"attempt {rollback.attempts}: {done}")
    return Attempt("applied")


# --- starting the next run ----------------------------------------------------------------------------
# The launch's idempotency key goes to the source every time, so a retried attempt starts one run.


def launch_via_smr(launch: RunLaunch) -> Attempt:
    try:
        answer = connector_for(launch.project).trigger_run(
            kickoff=launch.kickoff,
            idempotency_key=launch.idempotency_key,
            agent_profile=launch.model_profile,
            budget_usd=launch.budget_usd,
            budget_tokens=launch.budget_tokens,
        )
    except SourceError as exc:
        # A 4xx other than 429 is the backend refusing this request (an unknown profile, a limit it
        # will not take): asking again changes nothing.
        # A garbled answer may hide a run that was started: asking again with the same key finds it.
        status = getattr(exc.__cause__, "status_code", None)
        refused = isinstance(status, int) and 400 <= status < 500 and status != 429
        retryable = isinstance(exc, (*RETRYABLE_SOURCE_ERRORS, Malformed)) and not refused
        raise source_failed(exc, retryable=retryable) from None
    rid, state = str(answer["run_id"]), str(answer.get("state") or "")
    launches.record_accepted(
        launch.pk,
        external_run_id=rid,
        detail=f"attempt {launch.attempts}: SMR started run {rid}" + (f" (state {state})" if state else ""),
    )
    return Attempt("accepted")


def launch_via_webhook(launch: RunLaunch) -> Attempt:
    """`smrweb.start`; a 2xx means the harness took it (the run is confirmed when its events arrive)."""
    line = post_webhook(launch.project, webhooks.start_request(launch)).taken().line
    launches.record_accepted(
        launch.pk,
        external_run_id=launch.external_run_id,
        detail=f"attempt {launch.attempts}: {line}; waiting for run {launch.external_run_id}'s events",
    )
    return Attempt("accepted")


def launch_via_git(launch: RunLaunch) -> Attempt:
    """A new branch at the chosen commit; the project follows it, and the run (`git:<branch>`) starts
    with the kickoff as its first message and its cursor at that commit, so it counts only what is
    committed on it from now on."""
    from smrweb.sources.apply import apply_events
    from smrweb.sources.git import branches as git

    try:
        branch, commit, done = git.start_branch(launch)
    except SourceError as exc:
        raise source_failed(exc) from None
    # The run first (its cursor at the start commit, its kickoff: both the same on a retried attempt),
    # then the answer, which links it and makes the project follow the branch: until then no sync reads
    # the branch, so a crash in between leaves nothing a retry would not redo.
    rid, project = git.run_id_for(branch), launch.project
    services.record_poll(
        project, rid, source_cursor={"commit": commit, "base": commit}, git_branch=branch, git_commit=commit
    )
    kickoff = {
        "id": f"smrweb-kickoff-{launch.pk}",
        "type": "message",
        "topic": "smrweb.kickoff",
        "mode": "queue",
        "body": launch.kickoff,
    }
    apply_events(project, rid, [(None, kickoff)])
    launches.record_accepted(
        launch.pk, external_run_id=rid, detail=f"attempt {launch.attempts}: {done}", follow_branch=branch
    )
    return Attempt("accepted")


# --- steering: a runtime message, pause, resume ---------------------------------------------------------
# What the source answered makes the control `accepted`; it is `confirmed` later, when the source reports
# it back (ingest calls `services.confirm_reported`).


def control_via_smr(control: RunControl) -> Attempt:
    run = control.run
    try:
        connector = connector_for(run.project)
        if control.kind == ControlKind.MESSAGE:
            answer = None
            if control.attempts > 1:  # an earlier attempt may have delivered it and lost the answer
                answer = connector.find_message(run.external_id, causation_id=control.idempotency_key)
            answer = answer or connector.send_message(
                run.external_id, body=control.body, causation_id=control.idempotency_key
            )
        elif control.kind == ControlKind.PAUSE:
            answer = connector.pause_run(run.external_id)
        else:
            answer = connector.resume_run(run.external_id)
    except SourceError as exc:
        raise source_failed(exc) from None
    answer = answer if isinstance(answer, dict) else {}
    if control.kind == ControlKind.MESSAGE:
        ref = str(answer.get("message_id") or "")
        seq = answer.get("seq")
        detail = f"attempt {control.attempts}: SMR queued the message" + (
            f" (message {ref}{f', #{seq}' if isinstance(seq, int) else ''})" if ref else " (no message id)"
        )
        services.control_accepted(control.pk, detail=detail, source_ref=ref)
        return Attempt("accepted")
    if answer.get("already_in_state"):
        detail = f"attempt {control.attempts}: SMR says the run is already {answer.get('state') or 'there'}"
    else:
        state = str(answer.get("state") or "")
        status = str(answer.get("enqueue_status") or "accepted")
        detail = f"attempt {control.attempts}: SMR {status} the {control.kind}" + (
            f" (run {state})" if state else ""
        )
    services.control_accepted(
        control.pk, detail=detail, source_ref=str(answer.get("control_intent_id") or "")
    )
    return Attempt("accepted")


def control_via_webhook(control: RunControl) -> Attempt:
    """`smrweb.message`, `smrweb.pause` or `smrweb.resume`; a 2xx means the harness took it."""
    line = post_webhook(control.run.project, webhooks.control_request(control)).taken().line
    services.control_accepted(
        control.pk, detail=f"attempt {control.attempts}: {line}", source_ref=control.idempotency_key
    )
    return Attempt("accepted")


# Per action, per source: what an attempt calls. The stop of an SMR run goes through the connector in
# the stop task (it re-syncs the project); the stop of a push run is `dispatch.stop_push_run`.
TARGETS: dict[type, dict[str, Callable[..., Attempt]]] = {
    Rollback: {
        SourceKind.SMR: rollback_via_smr,
        SourceKind.PUSH: rollback_via_webhook,
        SourceKind.GIT: rollback_via_git,
    },
    RunLaunch: {
        SourceKind.SMR: launch_via_smr,
        SourceKind.PUSH: launch_via_webhook,
        SourceKind.GIT: launch_via_git,
    },
    RunControl: {
        SourceKind.SMR: control_via_smr,
        SourceKind.PUSH: control_via_webhook,
    },
}
