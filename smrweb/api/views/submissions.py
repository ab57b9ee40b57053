"""Submissions over the API: the leaderboard, and the lifecycle a reviewer moves them through (verify,
approve, reject, uploaded, arena result). People act here (with a session and the reviewer role); project
tokens are for harnesses and are refused these actions by the domain rules, with a 403 that says so."""

from __future__ import annotations

from django.db.models import Prefetch
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.views import APIView

from smrweb import tasks
from smrweb.api import examples
from smrweb.api.access import actor_of, project_for, project_for_person, submission_for
from smrweb.api.exports import ExportableList
from smrweb.api.schema import ERROR, ERRORS, UNSUPPORTED_MEDIA_TYPE
from smrweb.api.serializers.submissions import (
    ARENA_OUT,
    BULK_OUT,
    REVIEW_OUT,
    ArenaResultIn,
    BulkIn,
    DiffPendingSerializer,
    DiffSerializer,
    LifecycleSerializer,
    RefusedIn,
    ReviewIn,
    SubmissionSerializer,
    UploadedIn,
)
from smrweb.core import queue
from smrweb.tracking import queries
from smrweb.tracking.errors import SummaryPending
from smrweb.tracking.filters import SubmissionFilter
from smrweb.tracking.models import Review, Role, Submission, Verdict
from smrweb.tracking.queries import review
from smrweb.tracking.services import handoff, submissions


@extend_schema_view(get=extend_schema(responses={200: SubmissionSerializer(many=True), **ERRORS}))
class SubmissionList(ExportableList, generics.ListAPIView):
    """A project's submissions, best first in its scenario's direction; `?run=` narrows them to one run.

    `?format=csv` or `?format=jsonl`: every matching submission (no pagination), streamed, with a header
    row of these JSON field names (nested values as JSON text); errors stay JSON."""

    export_name = "submissions"

    serializer_class = SubmissionSerializer
    queryset = Submission.objects.none()  # the model, for the schema; get_queryset scopes it
    filterset_class = SubmissionFilter

    def get_queryset(self):
        return queries.leaderboard(project_for(self.request, self.kwargs["slug"]))


ILLEGAL_MOVE = {
    409: OpenApiResponse(
        ERROR,
        description="`illegal_transition`: the submission's status does not "
        "allow this move; the message names the next step.",
    )
}


def _fresh(sub: Submission) -> dict:
    sub = (
        Submission.objects.select_related("run", "proposed_by", "project")
        .prefetch_related("transitions", Prefetch("reviews", Review.objects.select_related("reviewer")))
        .get(pk=sub.pk)
    )
    return LifecycleSerializer(sub).data


class SubmissionLifecycle(APIView):
    @extend_schema(
        operation_id="submission_lifecycle",
        responses={200: LifecycleSerializer, **ERRORS},
        summary="A submission's status, verification and history of transitions",
    )
    def get(self, request, slug: str, submission_id: int):
        return Response(_fresh(submission_for(request, slug, submission_id)))


class SubmissionDiff(APIView):
    @extend_schema(
        operation_id="submission_diff",
        summary="What changed: this submission's artifact against another one",
        description="`against=approved` (default): the previous approved submission at the same path; "
        "`best`: the project's best other submission; or a submission id of this project. Different "
        "digests are never `identical`. ONNX models are compared by their summaries (inputs, outputs, "
        "opsets, parameters, operators) and their weights (tensors added, removed, reshaped; parameters "
        "changed, max and mean absolute change), which a worker computes once per model (and per pair) "
        'under memory and time limits: until it has, the answer is 202 with `{"status": "pending"}` and a '
        "`Retry-After`; ask again.",
        parameters=[
            OpenApiParameter("against", str, description="approved | best | <submission id>", required=False)
        ],
        responses={
            200: DiffSerializer,
            202: OpenApiResponse(
                DiffPendingSerializer,
                description="An ONNX model's summary is being computed on a worker: ask again after "
                "`Retry-After` seconds.",
            ),
            **ERRORS,
            409: OpenApiResponse(
                ERROR,
                description="`not_comparable`: a side has no stored artifact, is over the diff limit or is "
                "not a readable model; `too_large`: an ONNX model is past the summary's limits (the message "
                "says which: bytes, nodes, initializers, depth, memory or time), or the two summaries are "
                "too large to diff.",
            ),
        },
    )
    def get(self, request, slug: str, submission_id: int):
        sub = submission_for(request, slug, submission_id)
        try:
            diff = review.artifact_diff(sub, request.query_params.get("against"))
        except SummaryPending as exc:
            body = {"status": "pending", "message": exc.message}
            return Response(body, status=status.HTTP_202_ACCEPTED, headers={"Retry-After": "1"})
        return Response(DiffSerializer(diff).data)


class SubmissionVerify(APIView):
    @extend_schema(
        operation_id="submission_verify",
        request=None,
        responses={202: LifecycleSerializer, **ERRORS, **ILLEGAL_MOVE},
        summary="Verify a candidate (or invalid) submission on a worker (reviewers)",
    )
    def post(self, request, slug: str, submission_id: int):
        sub = submission_for(request, slug, submission_id)
        sub = submissions.request_verification(sub, by=actor_of(request))
        queue.dispatch(tasks.verify_submission, sub.pk)  # else re-queued by redispatch_stale_actions
        return Response(_fresh(sub), status=status.HTTP_202_ACCEPTED)


def _review(request, slug: str, submission_id: int, verdict: str) -> Response:
    sub = submission_for(
        request, slug, submission_id
    )  # first: outsiders get 404, other tokens 403, not field errors
    body = ReviewIn(data=request.data)
    body.is_valid(raise_exception=True)
    outcome = submissions.review(
        sub, by=actor_of(request), verdict=verdict, comment=body.validated_data["comment"]
    )
    return Response(
        {"counted": outcome.counted, "message": outcome.message, "submission": _fresh(outcome.submission)}
    )


class SubmissionApprove(APIView):
    @extend_schema(
        operation_id="submission_approve",
        request=ReviewIn,
        examples=[examples.REVIEW],
        responses={200: REVIEW_OUT, **ERRORS, **ILLEGAL_MOVE, **UNSUPPORTED_MEDIA_TYPE},
        summary="Approve a verified submission (reviewers)",
        description="With the project's second-person rule, the proposer's own approval is recorded "
        "but does not count (`counted: false`).",
    )
    def post(self, request, slug: str, submission_id: int):
        return _review(request, slug, submission_id, Verdict.APPROVE)


class SubmissionReject(APIView):
    @extend_schema(
        operation_id="submission_reject",
        request=ReviewIn,
        examples=[examples.REJECT],
        responses={200: REVIEW_OUT, **ERRORS, **ILLEGAL_MOVE, **UNSUPPORTED_MEDIA_TYPE},
        summary="Reject a verified submission (reviewers)",
        description="`comment` is required: why it is rejected (kept in the history, carried forward).",
    )
    def post(self, request, slug: str, submission_id: int):
        return _review(request, slug, submission_id, Verdict.REJECT)


class SubmissionUploaded(APIView):
    @extend_schema(
        operation_id="submission_mark_uploaded",
        request=UploadedIn,
        examples=[examples.UPLOADED],
        summary="Record that an approved submission was uploaded to the arena by hand (reviewers)",
        description="When the project's uploads for the arena's day are used up (the scenario's "
        "`arena_daily_limit`, counted in its `arena_timezone` from `arena_resets_at`), the answer is 409 "
        "`arena_daily_limit_reached` unless `confirm_over_limit` is true. `arena_uploads` in the answer "
        "says how many are left.",
        responses={
            200: LifecycleSerializer,
            **ERRORS,
            **ILLEGAL_MOVE,
            **UNSUPPORTED_MEDIA_TYPE,
            409: OpenApiResponse(ERROR, description="`arena_daily_limit_reached`, or an illegal move."),
        },
    )
    def post(self, request, slug: str, submission_id: int):
        sub = submission_for(request, slug, submission_id)  # first: outsiders get 404, other tokens 403
        body = UploadedIn(data=request.data)
        body.is_valid(raise_exception=True)
        sub = handoff.mark_uploaded(sub, by=actor_of(request), **body.validated_data)
        return Response(_fresh(sub))


class SubmissionRefused(APIView):
    @extend_schema(
        operation_id="submission_refused",
        request=RefusedIn,
        examples=[examples.REFUSED],
        responses={200: LifecycleSerializer, **ERRORS, **ILLEGAL_MOVE, **UNSUPPORTED_MEDIA_TYPE},
        summary="Record that the arena refused an uploaded submission (reviewers)",
        description="`reason` is required: what the arena said. The submission leaves the project's numbers "
        "and is carried forward as a failed approach; once fixed it may be marked uploaded again.",
    )
    def post(self, request, slug: str, submission_id: int):
        sub = submission_for(request, slug, submission_id)  # first: outsiders get 404, other tokens 403
        body = RefusedIn(data=request.data)
        body.is_valid(raise_exception=True)
        sub = handoff.record_refusal(sub, by=actor_of(request), reason=body.validated_data["reason"])
        return Response(_fresh(sub))


class SubmissionArenaResult(APIView):
    @extend_schema(
        operation_id="submission_arena_result",
        request=ArenaResultIn,
        examples=[examples.ARENA_RESULT],
        responses={201: ARENA_OUT, **ERRORS, **ILLEGAL_MOVE, **UNSUPPORTED_MEDIA_TYPE},
        summary="Record the arena's rank and score for an uploaded submission (reviewers)",
    )
    def post(self, request, slug: str, submission_id: int):
        sub = submission_for(request, slug, submission_id)  # first: outsiders get 404, other tokens 403
        body = ArenaResultIn(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        result = handoff.record_arena_result(
            sub,
            by=actor_of(request),
            rank=data.get("rank"),
            arena_score=data.get("arena_score"),
            note=data["note"],
        )
        better = handoff.arena_better(result.delta, maximize=sub.project.scenario.arena_maximize)
        return Response(
            {
                "id": result.pk,
                "rank": result.rank,
                "arena_score": result.arena_score,
                "delta": result.delta,
                "delta_best": result.delta_best,
                "rank_delta": result.rank_delta,
                "better": better,
                "note": result.note,
            },
            status=status.HTTP_201_CREATED,
        )


class SubmissionBulk(APIView):
    @extend_schema(
        operation_id="submission_bulk",
        request=BulkIn,
        examples=[examples.BULK],
        responses={200: BULK_OUT, **ERRORS, **UNSUPPORTED_MEDIA_TYPE},
        summary="Verify or approve many submissions at once (reviewers)",
        description=f"Each id is acted on by the same rules as one at a time, and audited per submission; "
        f"one that may not be moved is skipped with why (`proposed`: yours, where two other people must "
        f"approve; `approved_already`; `status`; `missing`). At most {submissions.BULK_MAX} ids (400 past "
        f"it). Project tokens are refused (403): this is a person's action.",
    )
    def post(self, request, slug: str):
        project = project_for_person(request, slug, role=Role.REVIEWER, doing="verify or approve submissions")
        body = BulkIn(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        results = submissions.bulk_act(
            project, by=request.user, action=data["action"], ids=data["ids"], comment=data["comment"]
        )
        for result in results:
            if result.outcome == "verifying":
                queue.dispatch(tasks.verify_submission, result.id)  # else redispatch_stale_actions
        return Response(
            {
                "action": data["action"],
                "summary": submissions.bulk_summary(data["action"], results),
                "results": [
                    {"id": r.id, "outcome": r.outcome, "detail": r.detail, "why": r.why} for r in results
                ],
            }
        )
