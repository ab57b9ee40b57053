"""Starting the next run over the API: a reviewer asks; a worker dispatches it through the project's
source (SMR's trigger_run, a signed start webhook, a new git branch). Idempotent by the request's
`Idempotency-Key` header (generated when absent: then every request starts a run)."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.views import APIView

from smrweb import tasks
from smrweb.api import examples
from smrweb.api.access import project_for, project_for_person
from smrweb.api.schema import ERROR, ERRORS, UNSUPPORTED_MEDIA_TYPE
from smrweb.api.serializers.launches import LaunchIn, LaunchSerializer
from smrweb.core import queue
from smrweb.tracking import queries
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.models import Role, Run, RunLaunch
from smrweb.tracking.services import launches

KEY_HEADER = OpenApiParameter(
    "Idempotency-Key",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description="8 to 100 letters, digits and . _ : - (a UUID). The same key with the same request answers "
    "the launch it made (200) instead of starting another run; the same key with a different request is "
    "refused (409). Without it the server makes one, and every request starts a run.",
)


def _launches(project):
    return RunLaunch.objects.filter(project=project).select_related(
        "project", "from_run", "run", "requested_by"
    )


@extend_schema_view(
    get=extend_schema(responses={200: LaunchSerializer(many=True), **ERRORS}, summary="A project's launches")
)
class LaunchList(generics.ListAPIView):
    """A project's launches, newest first."""

    serializer_class = LaunchSerializer
    queryset = RunLaunch.objects.none()  # the model, for the schema; get_queryset scopes it

    def get_queryset(self):
        return _launches(project_for(self.request, self.kwargs["slug"])).order_by("-created", "-id")

    @extend_schema(
        operation_id="launch_create",
        parameters=[KEY_HEADER],
        request=LaunchIn,
        examples=[examples.LAUNCH],
        responses={
            201: LaunchSerializer,
            200: LaunchSerializer,
            **ERRORS,
            **UNSUPPORTED_MEDIA_TYPE,
            409: OpenApiResponse(
                ERROR,
                description="`launch_refused`: the project is archived, or its source cannot start runs (a "
                "push project without a webhook URL); `idempotency_key_reused`: the key was used for another "
                "request.",
            ),
        },
        summary="Start the next run (reviewers)",
        description="201 with a new launch (a worker dispatches it); 200 with the launch this "
        "Idempotency-Key already made. Follow it with GET …/launches/{id}: `confirmed` once the new run "
        "appeared (`run`), linked to `from_run` as its parent.",
    )
    def post(self, request, slug: str):
        project = project_for_person(request, slug, role=Role.REVIEWER, doing="start runs")
        key = launches.check_key(request.headers.get("Idempotency-Key") or launches.new_key())
        body = LaunchIn(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        from_run = None
        if data.get("from_run"):
            from_run = Run.objects.filter(project=project, external_id=data["from_run"]).first()
            if from_run is None:
                raise InvalidInput("from_run", f"{slug} has no run {data['from_run']!r}.")
        defaults = None
        missing = {"kickoff", "model_profile", "budget_usd", "budget_tokens", "git_commit"} - data.keys()
        if missing:
            defaults = queries.launch_defaults(project, from_run, n=data["n"])
        kickoff = data.get("kickoff")
        if kickoff is None:
            kickoff = launches.compose_kickoff(
                defaults.carry_forward if data["carry_forward"] else "", data.get("text", "")
            )

        def given(name: str):
            return data[name] if name in data else getattr(defaults, name)

        launch, created = launches.request_launch(
            project,
            by=request.user,
            from_run=from_run,
            kickoff=kickoff,
            model_profile=given("model_profile"),
            budget_usd=given("budget_usd"),
            budget_tokens=given("budget_tokens"),
            git_commit=given("git_commit"),
            idempotency_key=key,
        )
        if created:
            queue.dispatch(tasks.dispatch_launch, launch.pk)  # else the stale-action sweep queues it
        answer = Response(
            LaunchSerializer(_launches(project).get(pk=launch.pk)).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )
        answer["Idempotency-Key"] = key
        answer["Location"] = f"/api/v1/projects/{slug}/launches/{launch.pk}"
        return answer


class LaunchDetail(APIView):
    @extend_schema(responses={200: LaunchSerializer, **ERRORS}, summary="One launch and where it stands")
    def get(self, request, slug: str, launch_id: int):
        launch = get_object_or_404(_launches(project_for(request, slug)), pk=launch_id)
        return Response(LaunchSerializer(launch).data)
