"""/mlflow/…: MLflow's REST paths (MLFLOW_TRACKING_URI=http://host/mlflow)."""

from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from smrweb.api.mlflow import views
from smrweb.api.opsmetrics import counted_ingest

app_name = "mlflow"

api = "api/2.0/mlflow"
ingest = counted_ingest("mlflow")
urlpatterns = [
    path(
        f"{api}/experiments/get-by-name", views.ExperimentGetByName.as_view(), name="experiment-get-by-name"
    ),
    path(f"{api}/experiments/get", views.ExperimentGet.as_view(), name="experiment-get"),
    path(f"{api}/experiments/search", views.ExperimentSearch.as_view(), name="experiment-search"),
    path(f"{api}/experiments/create", views.ExperimentCreate.as_view(), name="experiment-create"),
    path(f"{api}/runs/create", ingest(views.RunCreate.as_view()), name="run-create"),
    path(f"{api}/runs/get", views.RunGet.as_view(), name="run-get"),
    path(f"{api}/runs/update", ingest(views.RunUpdate.as_view()), name="run-update"),
    path(f"{api}/runs/log-metric", ingest(views.RunLogMetric.as_view()), name="run-log-metric"),
    path(f"{api}/runs/log-parameter", ingest(views.RunLogParam.as_view()), name="run-log-parameter"),
    path(f"{api}/runs/set-tag", ingest(views.RunSetTag.as_view()), name="run-set-tag"),
    path(f"{api}/runs/delete-tag", ingest(views.RunDeleteTag.as_view()), name="run-delete-tag"),
    path(f"{api}/runs/log-batch", ingest(views.RunLogBatch.as_view()), name="run-log-batch"),
    path(f"{api}/runs/search", views.RunSearch.as_view(), name="run-search"),
    path(f"{api}/metrics/get-history", views.MetricHistory.as_view(), name="metric-history"),
    path(f"{api}/logged-models/search", views.LoggedModelSearch.as_view(), name="logged-model-search"),
    path("api/3.0/mlflow/server-info", views.ServerInfo.as_view(), name="server-info"),
    path("api/2.0/mlflow-artifacts/artifacts", views.ArtifactList.as_view(), name="artifact-list"),
    path(
        "api/2.0/mlflow-artifacts/artifacts/<path:path>",
        ingest(views.ArtifactFile.as_view()),
        name="artifact-file",
    ),
    path("<path:rest>", csrf_exempt(views.not_found), name="not-found"),
]
