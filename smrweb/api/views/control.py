"""Steering a live run over the API (reviewers and admins, signed in; a project token cannot): send the
agent a runtime message, pause the run, resume it, and list what was asked and how each request went.
A worker dispatches each request to the run's source after the commit."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.views import APIView

from smrweb import tasks
from smrweb.api import examples
from smrweb.api.access import actor_of, project_for, run_for
from smrweb.api.schema import ERROR, ERRORS, UNSUPPORTED_MEDIA_TYPE
from smrweb.api.serializers.control import RunControlSerializer, RunMessageIn
from smrweb.core import queue
from smrweb.tracking import services
from smrweb.tracking.models import ControlKind, RunControl

REFUSED = OpenApiResponse(
    ERROR,
    description="`control_refused`: the run is not live, is already paused (pause) or is not paused "
    "(resume), the other of pause and resume is being sent, or the project's source cannot be steered (git "
    "projects; a push project without a webhook URL).",
)
ANSWERS = {
    202: RunControlSerializer,
    200: OpenApiResponse(
        RunControlSerializer,
        description="The same request still being sent (a double click): not sent twice.",
    ),
    **ERRORS,
    409: REFUSED,
}
WHO = (
    " Reviewers and admins of the project, signed in (a project token gets 403). 202 with the new request, "
    "which a worker sends to the run's source (SMR through the SDK, a push project's harness through the "
    "signed webhook, docs/api.md); watch it with `GET …/controls`."
)


def _requested(request, slug: str, run_id: str, kind: str, body: str = "") -> Response:
    run = run_for(project_for(request, slug), run_id)
    control = services.request_control(run, by=actor_of(request), kind=kind, body=body)
    if control.is_new:
        queue.dispatch(tasks.dispatch_control, control.pk)  # else it is in flight; the sweep finds lost ones
    answer = RunControlSerializer(RunControl.objects.select_related("run", "requested_by").get(pk=control.pk))
    return Response(answer.data, status=status.HTTP_202_ACCEPTED if control.is_new else status.HTTP_200_OK)


class RunMessages(APIView):
    @extend_schema(
        operation_id="run_message_send",
        request=RunMessageIn,
        examples=[examples.RUN_MESSAGE],
        responses={**ANSWERS, **UNSUPPORTED_MEDIA_TYPE},
        summary="Send the run's agent a runtime message (reviewers)",
        description="The message appears among the run's runtime messages once the source reports it back "
        "(the request is then `confirmed`)." + WHO,
    )
    def post(self, request, slug: str, run_id: str):
        form = RunMessageIn(data=request.data)
        form.is_valid(raise_exception=True)
        return _requested(request, slug, run_id, ControlKind.MESSAGE, form.validated_data["body"])


class RunPause(APIView):
    @extend_schema(
        operation_id="run_pause",
        request=None,
        responses=ANSWERS,
        summary="Pause a live run (reviewers)",
        description="`confirmed` once the run reports the state `paused`." + WHO,
    )
    def post(self, request, slug: str, run_id: str):
        return _requested(request, slug, run_id, ControlKind.PAUSE)


class RunResume(APIView):
    @extend_schema(
        operation_id="run_resume",
        request=None,
        responses=ANSWERS,
        summary="Resume a paused run (reviewers)",
        description="`confirmed` once the run reports a live state other than `paused`." + WHO,
    )
    def post(self, request, slug: str, run_id: str):
        return _requested(request, slug, run_id, ControlKind.RESUME)


@extend_schema_view(
    get=extend_schema(
        operation_id="run_control_list",
        summary="A run's steering requests, newest first",
        responses={200: RunControlSerializer(many=True), **ERRORS},
    )
)
class RunControls(generics.ListAPIView):
    """Messages, pauses and resumes asked for this run, with their status and the source's answers."""

    serializer_class = RunControlSerializer
    queryset = RunControl.objects.none()  # the model, for the schema; get_queryset scopes it

    def get_queryset(self):
        run = run_for(project_for(self.request, self.kwargs["slug"]), self.kwargs["run_id"])
        return (
            RunControl.objects.filter(run=run)
            .select_related("run", "requested_by")
            .order_by("-created", "-id")
        )
