"""The MLflow tracking API's endpoints: read the request (JSON body, or the query for GETs), resolve the
experiment or run the caller may reach (api/access.py's rule: a token its project, a session by role —
viewer to read, admin to write, as for events), call sources/mlflow/, answer in MLflow's JSON."""

from __future__ import annotations

import io
import json
from typing import Any

from django.conf import settings
from django.http import FileResponse, JsonResponse
from drf_spectacular.utils import extend_schema
from rest_framework.views import APIView

from smrweb.api.access import actor_of, project_for, visible_projects
from smrweb.api.mlflow.errors import as_mlflow_error, mlflow_error
from smrweb.api.parsers import MAX_DEPTH, too_deep
from smrweb.core import ratelimits
from smrweb.sources.mlflow import ingest, read, search, wire
from smrweb.sources.mlflow.wire import MlflowError, invalid
from smrweb.tracking import services
from smrweb.tracking.models import ApiToken, Project, Role, Run


@extend_schema(exclude=True)  # MLflow's API, documented by MLflow (docs/integrations.md)
class MlflowView(APIView):
    def handle_exception(self, exc):
        response = as_mlflow_error(exc)
        if response is None:
            raise exc
        return response

    # --- reading the request ---

    def body(self, request) -> dict:
        """The request's fields: the query for GET, the JSON object of the body otherwise."""
        if request.method == "GET":
            return {k: (v[0] if len(v) == 1 else v) for k, v in request.query_params.lists()}
        raw = request.body
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise invalid(f"The request body is not valid JSON: {exc}.") from None
        except RecursionError:  # `[` × 50,000: the decoder's own depth limit (review N8)
            raise invalid("The request body is not valid JSON: it is nested too deeply.") from None
        if not isinstance(body, dict):
            raise invalid("The request body must be a JSON object.")
        if too_deep(body):  # decoded, but a repr of it in an answer would recurse (the API's one bound)
            raise invalid(f"The request body is nested more than {MAX_DEPTH} levels deep.")
        return body

    # --- what the caller may reach ---

    def default_project(self, request) -> Project | None:
        return request.auth.project if isinstance(request.auth, ApiToken) else None

    def experiment(self, request, experiment_id: Any, role: str = Role.VIEWER) -> Project:
        project = read.experiment_for(
            visible_projects(request), experiment_id, default=self.default_project(request)
        )
        return project_for(request, project.slug, role=role)

    def run(self, request, run_id: str, role: str = Role.VIEWER) -> Run:
        runs = list(
            Run.objects.filter(project__in=visible_projects(request), external_id=run_id).select_related(
                "project__scenario"
            )[:2]
        )
        if not runs:
            # (the id is not echoed: an answer to someone who may not see the run says nothing of it)
            raise MlflowError("RESOURCE_DOES_NOT_EXIST", "No run with this id is visible to this caller.")
        if len(runs) > 1:
            raise invalid(f"Run id {run_id!r} names runs in several projects; use a project token.")
        run = runs[0]
        project_for(request, run.project.slug, role=role)
        return run

    def write_run(self, request, body: dict) -> Run:
        return self.run(request, wire.run_id_of(body), Role.ADMIN)


def ok(data: dict | None = None) -> JsonResponse:
    return JsonResponse(data or {})


# --- experiments -----------------------------------------------------------------------------------------


class ExperimentGetByName(MlflowView):
    def get(self, request):
        name = wire.text_field(self.body(request), "experiment_name")
        project = visible_projects(request).filter(slug=name).first()
        if project is None:
            raise MlflowError(
                "RESOURCE_DOES_NOT_EXIST", f"Could not find experiment with name {name[:200]!r}."
            )
        return ok({"experiment": read.experiment_json(project_for(request, project.slug))})


class ExperimentGet(MlflowView):
    def get(self, request):
        project = self.experiment(request, wire.text_field(self.body(request), "experiment_id"))
        return ok({"experiment": read.experiment_json(project)})


class ExperimentSearch(MlflowView):
    def get(self, request):
        return self.post(request)

    def post(self, request):
        return ok(search.search_experiments(visible_projects(request), self.body(request)))


class ExperimentCreate(MlflowView):
    """Experiments are smrweb projects, created in smrweb (by people who may): refused here, with the way."""

    def post(self, request):
        name = wire.text_field(self.body(request), "name")
        if visible_projects(request).filter(slug=name).exists():
            raise MlflowError("RESOURCE_ALREADY_EXISTS", f"Experiment {name[:200]!r} already exists.")
        raise MlflowError(
            "PERMISSION_DENIED",
            f"Experiments are smrweb projects: create project {name[:200]!r} in smrweb (or use the name of "
            "the project your token belongs to, its slug) and log into it with a token of that project.",
        )


# --- runs ------------------------------------------------------------------------------------------------


class RunCreate(MlflowView):
    def post(self, request):
        body = self.body(request)
        project = self.experiment(request, body.get("experiment_id"), Role.ADMIN)
        run = ingest.create_run(project, body, by=actor_of(request))
        return ok({"run": read.run_json(run)})


class RunGet(MlflowView):
    def get(self, request):
        run = self.run(request, wire.run_id_of(self.body(request)))
        return ok({"run": read.run_json(run)})


class RunUpdate(MlflowView):
    def post(self, request):
        body = self.body(request)
        run = ingest.update_run(self.write_run(request, body), body, by=actor_of(request))
        return ok({"run_info": read.run_json(run)["info"]})


class RunLogMetric(MlflowView):
    def post(self, request):
        body = self.body(request)
        ingest.log_metric(self.write_run(request, body), body, by=actor_of(request))
        return ok()


class RunLogParam(MlflowView):
    def post(self, request):
        body = self.body(request)
        ingest.log_param(self.write_run(request, body), body, by=actor_of(request))
        return ok()


class RunSetTag(MlflowView):
    def post(self, request):
        body = self.body(request)
        ingest.set_tag(self.write_run(request, body), body, by=actor_of(request))
        return ok()


class RunDeleteTag(MlflowView):
    def post(self, request):
        body = self.body(request)
        ingest.delete_tag(self.write_run(request, body), body, by=actor_of(request))
        return ok()


class RunLogBatch(MlflowView):
    def post(self, request):
        body = self.body(request)
        ingest.log_batch(self.write_run(request, body), body, by=actor_of(request))
        return ok()


class RunSearch(MlflowView):
    def post(self, request):
        body = self.body(request)
        ids = body.get("experiment_ids") or []
        if not isinstance(ids, list) or not ids:
            raise invalid("experiment_ids must be a non-empty list.")
        projects = [self.experiment(request, experiment_id) for experiment_id in ids]
        return ok(search.search_runs(projects, body))


class LoggedModelSearch(MlflowView):
    """MLflow 3's logged models: smrweb keeps none (log_model is not supported), so the answer is honestly
    empty. The client asks when it lists or downloads a run's artifacts below a directory."""

    def post(self, request):
        for experiment_id in self.body(request).get("experiment_ids") or []:
            self.experiment(request, experiment_id)
        return ok({"models": []})


class MetricHistory(MlflowView):
    def get(self, request):
        body = self.body(request)
        run = self.run(request, wire.run_id_of(body))
        return ok(read.metric_history(run, wire.text_field(body, "metric_key")))


# --- artifacts: MLflow's artifact proxy ------------------------------------------------------------------


class ServerInfo(MlflowView):
    """What the artifact client asks before an upload: smrweb proxies every upload and download itself."""

    def get(self, request):
        return ok(
            {
                "store_type": "smrweb",
                "workspaces_enabled": False,
                "multipart_uploads_enabled": False,
                "multipart_downloads_enabled": False,
            }
        )


class ArtifactList(MlflowView):
    def get(self, request):
        location = wire.text_field(self.body(request), "path", required=False)
        if not location:
            return ok({"files": []})  # the root lists no runs: experiments are not browsed here
        experiment_id, run_id, path = wire.split_artifact_path(location)
        run = self.artifact_run(request, experiment_id, run_id)
        return ok(read.list_artifacts(run, path))

    def artifact_run(self, request, experiment_id: str, run_id: str, role: str = Role.VIEWER) -> Run:
        run = self.run(request, run_id, role)
        if str(run.project_id) != experiment_id:
            raise MlflowError(
                "RESOURCE_DOES_NOT_EXIST", f"Run {run_id!r} is not in experiment {experiment_id!r}."
            )
        return run


class ArtifactFile(ArtifactList):
    def get(self, request, path: str):
        experiment_id, run_id, inner = wire.split_artifact_path(path)
        run = self.artifact_run(request, experiment_id, run_id)
        artifact = read.latest_artifact(run, inner)
        if artifact is None:
            raise MlflowError("RESOURCE_DOES_NOT_EXIST", f"No artifact {inner[:200]!r} in run {run_id}.")
        response = FileResponse(services.open_blob(artifact.blob), content_type="application/octet-stream")
        response["Content-Length"] = str(artifact.blob.size)
        response["X-Content-Type-Options"] = "nosniff"
        return response

    def put(self, request, path: str):
        experiment_id, run_id, inner = wire.split_artifact_path(path)
        run = self.artifact_run(request, experiment_id, run_id, Role.ADMIN)
        limited = ratelimits.hit(
            request, group="upload", rate=settings.SMRWEB_UPLOAD_RATE, keys=[ratelimits.by_principal]
        )
        if limited:  # before the body is read, as for the API's uploads (the client retries a 429)
            response = mlflow_error(429, "REQUEST_LIMIT_EXCEEDED", limited.message)
            response["Retry-After"] = str(limited.retry_after)
            return response
        if int(request.META.get("CONTENT_LENGTH") or 0) > settings.SMRWEB_MAX_ARTIFACT_BYTES:
            raise invalid(
                f"Artifacts are limited to {settings.SMRWEB_MAX_ARTIFACT_BYTES} bytes; nothing was stored."
            )
        content = request.stream or io.BytesIO()
        ingest.store_artifact(
            run, inner, content, content_type=request.content_type or "", by=actor_of(request)
        )
        return ok()


def not_found(request, rest: str = ""):
    """Any other path under /mlflow: MLflow's answer to an endpoint it does not have."""
    return mlflow_error(
        404,
        "ENDPOINT_NOT_FOUND",
        f"smrweb does not offer {request.method} /mlflow/{rest[:200]} (docs/integrations.md lists the MLflow "
        "calls it answers).",
    )
