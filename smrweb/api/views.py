"""REST API views: access check first, then a service call (writes) or a query (reads)."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import generics, serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.parsers import BaseParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from smrweb.api import examples
from smrweb.api.access import actor_of, project_for, run_for, visible_projects
from smrweb.api.schema import ERROR, ERRORS, UNSUPPORTED_MEDIA_TYPE
from smrweb.api.serializers.artifacts import (
    ArtifactSerializer,
    ArtifactUploadResultSerializer,
    ArtifactUploadSerializer,
)
from smrweb.api.serializers.events import IngestResultSerializer
from smrweb.api.serializers.projects import ProjectCreateSerializer, ProjectSerializer
from smrweb.api.serializers.runs import (
    MetricKeysSerializer,
    MetricSeriesSerializer,
    RunSerializer,
    RunSettingsSerializer,
    TurnSerializer,
)
from smrweb.api.serializers.scenarios import ScenarioSerializer
from smrweb.api.serializers.submissions import SubmissionSerializer
from smrweb.core import ratelimits
from smrweb.core.downloads import attachment_response
from smrweb.sources import smr
from smrweb.tracking import queries, services
from smrweb.tracking.errors import ArtifactTooLarge, BatchTooLarge, InvalidInput
from smrweb.tracking.events import batch_json_schema, parse_events
from smrweb.tracking.filters import RunFilter, SubmissionFilter
from smrweb.tracking.models import (
    AgentTurn,
    ApiToken,
    Artifact,
    Project,
    Role,
    Run,
    Scenario,
    Submission,
)

# --- scenarios and projects -------------------------------------------------------------------


@extend_schema_view(get=extend_schema(responses={200: ScenarioSerializer(many=True), **ERRORS}),
                    post=extend_schema(responses={201: ScenarioSerializer, **ERRORS,
                                                  **UNSUPPORTED_MEDIA_TYPE}, examples=[examples.SCENARIO]))
class ScenarioList(generics.ListCreateAPIView):
    """Scenarios you may see: the shared presets and those of your projects (a token: its project's);
    staff users see all and create them."""

    serializer_class = ScenarioSerializer

    def get_queryset(self):
        return Scenario.objects.visible_to(actor_of(self.request))

    def create(self, request, *args, **kwargs):
        if not request.user.is_staff:  # before validation: a non-staff user learns nothing from field errors
            raise PermissionDenied("Only staff users create scenarios.")
        return super().create(request, *args, **kwargs)

    def perform_create(self, serializer):
        serializer.instance = services.create_scenario(by=self.request.user, **serializer.validated_data)


@extend_schema_view(get=extend_schema(responses={200: ScenarioSerializer, **ERRORS}))
class ScenarioDetail(generics.RetrieveAPIView):
    serializer_class = ScenarioSerializer
    lookup_field = "key"

    def get_queryset(self):
        return Scenario.objects.visible_to(actor_of(self.request))


class ProjectList(APIView):
    """Projects you can see (a token sees its own). Staff, and users given the permission to add projects,
    create projects and become their admin; binding an SMR project needs the permission to bind sources."""

    @extend_schema(responses={200: ProjectSerializer(many=True), **ERRORS})
    def get(self, request):
        return Response(ProjectSerializer(visible_projects(request).select_related("scenario"), many=True).data)

    @extend_schema(request=ProjectCreateSerializer, examples=[examples.PROJECT],
                   responses={201: ProjectSerializer, **ERRORS, **UNSUPPORTED_MEDIA_TYPE})
    def post(self, request):
        if isinstance(request.auth, ApiToken):
            raise PermissionDenied("Project tokens cannot create projects; sign in as a user.")
        if not services.may_create_projects(request.user):  # before validation: field errors tell nothing
            raise PermissionDenied("Creating projects is for staff and users given the permission to add projects.")
        form = ProjectCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        fields = dict(form.validated_data)
        check = smr.check_binding if fields.pop("check_connection", True) else None
        project = services.create_project(by=request.user, check_binding=check, **fields)
        return Response(ProjectSerializer(project).data, status=status.HTTP_201_CREATED)


class ProjectDetail(APIView):
    @extend_schema(responses={200: ProjectSerializer, **ERRORS})
    def get(self, request, slug: str):
        return Response(ProjectSerializer(project_for(request, slug)).data)


# --- runs -------------------------------------------------------------------------------------


@extend_schema_view(get=extend_schema(responses={200: RunSerializer(many=True), **ERRORS}))
class RunList(generics.ListAPIView):
    """A project's runs, most recently active first (or in `?sort=` order), with filters."""

    serializer_class = RunSerializer
    queryset = Run.objects.none()  # the model, for the schema; get_queryset scopes it
    filterset_class = RunFilter

    def get_queryset(self):
        project = project_for(self.request, self.kwargs["slug"])
        return Run.objects.filter(project=project).select_related("project__scenario").order_by("-last_progress_at", "-id")


class RunDetail(APIView):
    @extend_schema(responses={200: RunSerializer, **ERRORS})
    def get(self, request, slug: str, run_id: str):
        return Response(RunSerializer(run_for(project_for(request, slug), run_id)).data)

    @extend_schema(request=RunSettingsSerializer, examples=[examples.RUN_SETTINGS],
                   responses={200: RunSerializer, **ERRORS, **UNSUPPORTED_MEDIA_TYPE},
                   description="Set a run's budget, model profiles or git position; creates the run if new.")
    def patch(self, request, slug: str, run_id: str):
        project = project_for(request, slug, role=Role.ADMIN)
        form = RunSettingsSerializer(data=request.data, partial=True)
        form.is_valid(raise_exception=True)
        run = services.update_run_settings(project, run_id, by=actor_of(request), **form.validated_data)
        return Response(RunSerializer(run).data)


class UnparsedJSON(BaseParser):
    """Accepts application/json and parses nothing: the view reads `request.body` itself."""

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None):
        return {}


class RunEvents(APIView):
    """The push ingest contract: a JSON list of at most 5,000 events, applied all-or-nothing."""

    # The body is validated straight from bytes (msgspec / pydantic-core) in the view; this parser only
    # lets a session's CSRF check look at request.POST without DRF refusing the media type (415).
    parser_classes = [UnparsedJSON]

    @extend_schema(
        request={"application/json": batch_json_schema()}, examples=[examples.EVENTS],
        responses={200: IngestResultSerializer, 413: OpenApiResponse(ERROR), **ERRORS},
    )
    def post(self, request, slug: str, run_id: str):
        project = project_for(request, slug, role=Role.ADMIN)
        try:
            body = request.body
        except RequestDataTooBig:
            raise BatchTooLarge("The request body is over 10 MB; send smaller batches.") from None
        result = services.ingest_events(project, run_id, parse_events(body))
        return Response({"run": run_id, "accepted": result.accepted, "duplicates": result.duplicates})


@extend_schema_view(get=extend_schema(responses={200: TurnSerializer(many=True), **ERRORS}))
class RunTurns(generics.ListAPIView):
    """A run's agent turns in time order."""

    serializer_class = TurnSerializer
    queryset = AgentTurn.objects.none()  # the model, for the schema; get_queryset scopes it

    def get_queryset(self):
        run = run_for(project_for(self.request, self.kwargs["slug"]), self.kwargs["run_id"])
        return AgentTurn.objects.filter(run=run).order_by("ts", "id")


class RunMetrics(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("key", OpenApiTypes.STR, description="Metric key; without it, the list of keys."),
            OpenApiParameter("points", OpenApiTypes.INT, description="At most this many points (default 1000, max 10000)."),
        ],
        responses={200: PolymorphicProxySerializer(
            component_name="MetricsAnswer", serializers=[MetricKeysSerializer, MetricSeriesSerializer],
            resource_type_field_name=None), **ERRORS},
    )
    def get(self, request, slug: str, run_id: str):
        run = run_for(project_for(request, slug), run_id)
        key = request.query_params.get("key")
        if not key:
            return Response({"keys": queries.metric_keys(run)})
        try:
            points = int(request.query_params.get("points", 1000))
        except ValueError:
            raise InvalidInput("points", "Expected an integer.") from None
        if not 2 <= points <= 10000:
            raise InvalidInput("points", "Must be between 2 and 10000.")
        total, series = queries.metric_series(run, key, points)
        return Response({
            "key": key, "total_points": total, "downsampled": total > len(series),
            "points": [p.__dict__ for p in series],
        })


# --- artifacts --------------------------------------------------------------------------------


class RunArtifacts(APIView):
    parser_classes = [MultiPartParser]

    @extend_schema(responses={200: ArtifactSerializer(many=True), **ERRORS})
    def get(self, request, slug: str, run_id: str):
        run = run_for(project_for(request, slug), run_id)
        artifacts = Artifact.objects.filter(run=run).select_related("blob", "run__project")
        return Response(ArtifactSerializer(artifacts, many=True, context={"request": request}).data)

    @extend_schema(
        request={"multipart/form-data": ArtifactUploadSerializer},
        responses={201: ArtifactUploadResultSerializer, 200: ArtifactUploadResultSerializer,
                   413: OpenApiResponse(ERROR, description="Larger than SMRWEB_MAX_ARTIFACT_BYTES, or over the "
                                                           "project's storage quota."),
                   429: OpenApiResponse(ERROR, description="Too many uploads from this caller (SMRWEB_UPLOAD_RATE)."),
                   **ERRORS, **UNSUPPORTED_MEDIA_TYPE},
        description="Upload one file. The server computes its sha256 and, when `sha256` is sent, refuses a mismatch. "
                    "The same bytes at the same path are stored once (200); new content answers 201.",
    )
    def post(self, request, slug: str, run_id: str):
        project = project_for(request, slug, role=Role.ADMIN)
        limited = ratelimits.hit(request, group="upload", rate=settings.SMRWEB_UPLOAD_RATE,
                                 keys=[ratelimits.by_principal])
        if limited:  # before the body is read (finding 10)
            return Response({"code": "rate_limited", "message": limited.message, "errors": []}, status=429,
                            headers={"Retry-After": str(limited.retry_after)})
        # Refuse an announced oversize body before Django spools it to disk.
        if int(request.META.get("CONTENT_LENGTH") or 0) > settings.MAX_ARTIFACT_BYTES + 1024 * 1024:
            raise ArtifactTooLarge(f"Artifacts are limited to {settings.MAX_ARTIFACT_BYTES} bytes.")
        form = ArtifactUploadSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        upload = form.validated_data["file"]
        artifact, created = services.store_artifact(
            project, run_id,
            path=form.validated_data.get("path") or upload.name,
            content=upload,
            kind=form.validated_data["kind"],
            content_type=upload.content_type or "application/octet-stream",
            claimed_sha256=form.validated_data.get("sha256"),
            commit=form.validated_data["commit"],
            by=actor_of(request),
        )
        artifact.created_now = created
        data = ArtifactUploadResultSerializer(artifact, context={"request": request}).data
        return Response(data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


@extend_schema(responses={(200, "application/octet-stream"): OpenApiTypes.BINARY, **ERRORS})
class ArtifactDownload(APIView):
    def get(self, request, slug: str, run_id: str, artifact_id: int):
        run = run_for(project_for(request, slug), run_id)
        artifact = get_object_or_404(Artifact.objects.select_related("blob"), run=run, pk=artifact_id)
        return attachment_response(services.open_blob(artifact.blob), path=artifact.path,
                                   content_type=artifact.content_type, sha256=artifact.blob.sha256,
                                   size=artifact.blob.size)


# --- submissions ------------------------------------------------------------------------------


@extend_schema_view(get=extend_schema(responses={200: SubmissionSerializer(many=True), **ERRORS}))
class SubmissionList(generics.ListAPIView):
    """A project's submissions, best first in its scenario's direction; `?run=` narrows them to one run."""

    serializer_class = SubmissionSerializer
    queryset = Submission.objects.none()  # the model, for the schema; get_queryset scopes it
    filterset_class = SubmissionFilter

    def get_queryset(self):
        return queries.leaderboard(project_for(self.request, self.kwargs["slug"]))


class Health(APIView):
    """Liveness for load balancers and compose: the database answers."""

    permission_classes = []
    authentication_classes = []

    @extend_schema(responses={200: inline_serializer("Health", {"status": serializers.CharField()})})
    def get(self, request):
        Project.objects.exists()
        return Response({"status": "ok"})

