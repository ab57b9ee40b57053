"""What a person does from a run's page: stop it, close it as abandoned, roll it back, exclude it from the
project's numbers (or count it again), snooze its alerts. Each a POST that redirects back."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect
from django.utils import timezone
from django.views.decorators.http import require_POST

from smrweb import tasks
from smrweb.core import queue
from smrweb.dashboard.access import run_for_user
from smrweb.tracking import services
from smrweb.tracking.errors import InvalidInput, TrackingError
from smrweb.tracking.models import (
    Checkpoint,
    Role,
    Rollback,
    Submission,
)
from smrweb.tracking.services import rollbacks, submissions


@require_POST
@login_required
def stop_run(request, slug: str, run_id: str):
    """Ask the run's source to stop it (reviewers and admins); audited, dispatched after commit."""
    run = run_for_user(request, slug, run_id, role=Role.REVIEWER)
    try:
        services.request_stop(run, by=request.user)
    except TrackingError as exc:
        messages.error(request, exc.message)
    else:
        if queue.dispatch(tasks.stop_run, run.pk):
            messages.success(request, f"Asked the source to stop {run.external_id}.")
        else:  # nothing re-queues a stop later: say so instead of pretending (and instead of a 500)
            messages.error(
                request,
                "The task queue cannot be reached right now, so the stop was not sent; "
                "try again in a minute.",
            )
    return redirect(run.get_absolute_url())


@require_POST
@login_required
def close_run(request, slug: str, run_id: str):
    """Close a silent push or git run as abandoned, with the reason why (reviewers and admins; audited)."""
    run = run_for_user(request, slug, run_id, role=Role.REVIEWER)
    try:
        services.close_run(run, by=request.user, reason=request.POST.get("reason", ""))
    except TrackingError as exc:
        messages.error(request, f"Not closed: {exc.message}")
    else:
        messages.success(
            request,
            f"{run.name} is closed as abandoned. Events its harness sends later are still recorded, and a "
            f"state it reports after this reopens the run.",
        )
    return redirect(run.get_absolute_url())


@require_POST
@login_required
def rollback(request, slug: str, run_id: str):
    """Roll the run back to one of its submissions or checkpoints (reviewers and admins): one click,
    one rollback however often it is clicked; dispatched by a worker after commit."""
    run = run_for_user(request, slug, run_id, role=Role.REVIEWER)
    submission = checkpoint = None
    try:
        if request.POST.get("submission"):
            submission = get_object_or_404(Submission, run=run, pk=int(request.POST["submission"]))
        elif request.POST.get("checkpoint"):
            checkpoint = get_object_or_404(Checkpoint, run=run, pk=int(request.POST["checkpoint"]))
    except ValueError:
        messages.error(request, "That rollback target could not be read.")
        return redirect(run.get_absolute_url())
    try:
        requested = rollbacks.request_rollback(
            by=request.user,
            reason=request.POST.get("reason", ""),
            submission=submission,
            checkpoint=checkpoint,
        )
    except TrackingError as exc:
        messages.error(request, exc.message)
    else:
        if requested.created:
            queued = queue.dispatch(tasks.dispatch_rollback, requested.rollback.pk)
            # Gone once the live page shows more (the rollback line at its top says where it stands).
            (messages.success if queued else messages.warning)(
                request,
                f"Rollback to {rollbacks.describe_target(requested.rollback)} requested; "
                + (
                    "a worker is dispatching it."
                    if queued
                    else "the worker queue is unreachable right now, so it "
                    "is dispatched as soon as the queue is back."
                ),
                extra_tags="until-change",
            )
        elif requested.rollback.status in Rollback.OPEN:
            messages.warning(
                request,
                f"A rollback of this run is already in flight "
                f"(to {rollbacks.describe_target(requested.rollback)}); it was not requested twice.",
            )
        else:
            done = requested.rollback
            at = timezone.localtime(done.created)  # the viewer's clock (dashboard.clock)
            messages.warning(
                request,
                f"This run was already rolled back to {rollbacks.describe_target(done)} at "
                f"{at:%H:%M} {timezone.get_current_timezone_name()} ({done.status}) and has "
                f"scored nothing since; nothing new was requested.",
            )
    return redirect(request.POST.get("next") if _safe_next(request) else run.get_absolute_url())


@require_POST
@login_required
def run_exclusion(request, slug: str, run_id: str):
    """Take a whole run out of the project's numbers, or count it again (admins; audited)."""
    run = run_for_user(request, slug, run_id, role=Role.ADMIN)
    try:
        if request.POST.get("action") == "include":
            submissions.include_run(run, by=request.user)
            messages.success(request, f"{run.external_id} counts again in the project's numbers.")
        else:
            submissions.exclude_run(run, by=request.user, reason=request.POST.get("reason", ""))
            messages.success(
                request,
                f"{run.external_id} is excluded from the project's numbers (best, "
                f"leaderboard, charts, regressions, carry-forward); include it again at any time.",
            )
    except TrackingError as exc:
        messages.error(request, exc.message)
    return redirect(run.get_absolute_url())


@require_POST
@login_required
def snooze_run(request, slug: str, run_id: str):
    """Snooze the run's alerts for `hours` (action=snooze), or lift the snooze (action=unsnooze);
    reviewers and admins, audited."""
    run = run_for_user(request, slug, run_id, role=Role.REVIEWER)
    if request.POST.get("action") == "unsnooze":
        services.unsnooze_run(run, by=request.user)
        messages.success(request, f"Alerts about {run.external_id} are sent again.")
        return redirect(run.get_absolute_url())
    try:
        hours = float(request.POST.get("hours", ""))
    except ValueError:
        hours = None
    try:
        if hours is None:
            raise InvalidInput("hours", "A number of hours, e.g. 4 or 0.5.")
        snooze = services.snooze_run(run, by=request.user, hours=hours)
    except InvalidInput as exc:
        messages.error(request, f"Not snoozed: {exc.message}")
    else:
        until = timezone.localtime(snooze.until)  # the viewer's clock (dashboard.clock)
        messages.success(
            request,
            f"Alerts about {run.external_id} are snoozed until {until:%Y-%m-%d %H:%M} "
            f"{timezone.get_current_timezone_name()}; what happens meanwhile is logged, not sent.",
        )
    return redirect(run.get_absolute_url())


def _safe_next(request) -> bool:
    from django.utils.http import url_has_allowed_host_and_scheme

    target = request.POST.get("next", "")
    return bool(target) and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()})
