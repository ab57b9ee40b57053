"""Rollbacks over the API: a reviewer rolls a run back to one of its submissions or checkpoints; a
worker dispatches it to the run's source."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from smrweb import tasks
from smrweb.api import examples
from smrweb.api.access import actor_of, project_for, run_for
from smrweb.api.schema import ERROR, ERRORS, UNSUPPORTED_MEDIA_TYPE
from smrweb.api.serializers.rollbacks import RollbackIn, RollbackSerializer
from smrweb.core import queue
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.models import Checkpoint, Rollback, Submission
from smrweb.tracking.services import rollbacks


class RunRollback(APIView):
    @extend_schema(
        operation_id="run_rollback",
        request=RollbackIn,
        examples=[examples.ROLLBACK],
        responses={
            202: RollbackSerializer,
            200: RollbackSerializer,
            **ERRORS,
            **UNSUPPORTED_MEDIA_TYPE,
            409: OpenApiResponse(
                ERROR,
                description="`rollback_refused`: the checkpoint cannot be "
                "restored, or a push project has no harness webhook URL.",
            ),
        },
        summary="Roll a run back to one of its submissions or checkpoints (reviewers)",
        description="202 with a new rollback (dispatched by a worker); 200 with the rollback already "
        "in flight for this run — a run has at most one.",
    )
    def post(self, request, slug: str, run_id: str):
        run = run_for(project_for(request, slug), run_id)
        body = RollbackIn(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        submission = checkpoint = None
        if data.get("submission"):
            submission = Submission.objects.filter(run=run, pk=data["submission"]).first()
            if submission is None:
                raise InvalidInput(
                    "submission", f"Run {run.external_id} has no submission {data['submission']}."
                )
        if data.get("checkpoint"):
            checkpoint = Checkpoint.objects.filter(run=run, external_id=data["checkpoint"]).first()
            if checkpoint is None:
                raise InvalidInput(
                    "checkpoint", f"Run {run.external_id} has no checkpoint {data['checkpoint']!r}."
                )
        requested = rollbacks.request_rollback(
            by=actor_of(request), reason=data["reason"], submission=submission, checkpoint=checkpoint
        )
        if requested.created:
            queue.dispatch(tasks.dispatch_rollback, requested.rollback.pk)  # else re-queued later
        rollback = Rollback.objects.select_related("run", "target_checkpoint", "requested_by").get(
            pk=requested.rollback.pk
        )
        return Response(
            RollbackSerializer(rollback).data,
            status=status.HTTP_202_ACCEPTED if requested.created else status.HTTP_200_OK,
        )
