"""The run page and artifact downloads for signed-in users."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from smrweb.core.downloads import artifact_response
from smrweb.dashboard.access import fragment_template, run_for_user
from smrweb.sources import tasks
from smrweb.tracking import queries, services
from smrweb.tracking.errors import TrackingError
from smrweb.tracking.models import Artifact, Role, SourceKind

RECENT_TURNS = 50


@require_GET
@login_required
@vary_on_headers("HX-Request")
def run_detail(request, slug: str, run_id: str):
    run = run_for_user(request, slug, run_id)
    turns = list(run.turns.order_by("-ts", "-id")[:RECENT_TURNS])
    context = {
        "project": run.project,
        "run": run,
        "history": queries.score_histories([run.pk], per_run=200).get(run.pk, []),
        "turns": turns,
        "submissions": run.submissions.select_related("artifact__blob").order_by("-ts", "-id")[:20],
        "artifacts": run.artifacts.select_related("blob")[:50],
        "checkpoints": run.checkpoints.order_by("-ts", "-id")[:20],
        "runtime_messages": run.messages.order_by("-seq")[:20],  # not "messages": that is Django's flash messages
        "state_changes": run.state_changes.order_by("-ts", "-id")[:20],
        "stalled_for": queries.stalled_for(run),
        "can_stop": run.project.source == SourceKind.SMR and run.project.allows(request.user, Role.REVIEWER),
    }
    return render(request, fragment_template(request, "dashboard/run_detail.html", "run-live"), context)


@require_GET
@login_required
def download_artifact(request, slug: str, run_id: str, artifact_id: int):
    run = run_for_user(request, slug, run_id)
    artifact = get_object_or_404(Artifact.objects.select_related("blob"), run=run, pk=artifact_id)
    return artifact_response(artifact)


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
        tasks.stop_run.delay_on_commit(run.pk)
        messages.success(request, f"Asked the source to stop {run.external_id}.")
    return redirect(run.get_absolute_url())
