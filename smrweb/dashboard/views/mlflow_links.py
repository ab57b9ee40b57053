"""The links the MLflow client prints ("🏃 View run … at: <tracking URI>/#/experiments/<id>/runs/<run id>"):
`/mlflow/` is a page whose script (static/js/mlflow-link.js) reads the fragment, which never reaches the
server, and goes on to `/mlflow/runs/<run id>` or `/mlflow/experiments/<id>`, which send the signed-in person
to the run's or the project's page (404 for what they may not see, as everywhere)."""

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_safe

from smrweb.tracking.models import Project, Run


@require_safe
def mlflow_link(request):
    """No data of its own (so no sign-in): the script sends the browser on, and the next page asks."""
    return render(request, "dashboard/mlflow_link.html")


@require_safe
@login_required
def mlflow_run(request, run_id: str):
    """The run with MLflow's run id that this person may see (in experiment `?experiment=` when given:
    one run id can be in two projects); the newest when several."""
    runs = Run.objects.filter(
        project__in=Project.objects.visible_to(request.user), external_id=run_id
    ).select_related("project")
    experiment = request.GET.get("experiment", "")
    if experiment.isdigit() and len(experiment) <= 18:
        runs = runs.filter(project_id=int(experiment))
    run = runs.order_by("-started_at", "-id").first()
    if run is None:
        raise Http404("No run with this id that you may see.")
    return redirect("dashboard:run-detail", run.project.slug, run.external_id)


@require_safe
@login_required
def mlflow_experiment(request, experiment_id: str):
    """The project that is MLflow's experiment `experiment_id` (its primary key, sources/mlflow/read.py)."""
    if not experiment_id.isdigit() or len(experiment_id) > 18:
        raise Http404("No such experiment.")
    project = Project.objects.visible_to(request.user).filter(pk=int(experiment_id)).first()
    if project is None:
        raise Http404("No experiment with this id that you may see.")
    return redirect("dashboard:project-detail", project.slug)
