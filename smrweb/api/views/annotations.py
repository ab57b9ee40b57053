"""What people write on runs and submissions, over the API: a run's tags (list, set, remove), its note
(read, write) and the comments on runs and on submissions (list, write, edit, delete).

Reading is for whoever reaches the project (viewers, its tokens). Tags are a harness's business too (its
token may set them) and otherwise need the reviewer role; notes and comments are prose with an author,
so they need a signed-in person with the reviewer role (a token: 403). Editing a comment is its author's;
deleting one, its author's or an admin's."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import generics, status
from rest_framework.exceptions import NotFound
from rest_framework.generics import get_object_or_404
from rest_framework.response import Response
from rest_framework.views import APIView

from smrweb.api import examples
from smrweb.api.access import actor_of, project_for, project_for_person, run_for
from smrweb.api.schema import ERRORS, UNSUPPORTED_MEDIA_TYPE
from smrweb.api.serializers.annotations import (
    CommentIn,
    CommentSerializer,
    NoteIn,
    NoteSerializer,
    TagIn,
    TagSerializer,
)
from smrweb.tracking import services
from smrweb.tracking.models import Comment, Role, RunTag, Submission
from smrweb.tracking.queries import annotations

WRITE = "write notes or comments"
KEY = OpenApiParameter("key", OpenApiTypes.STR, OpenApiParameter.PATH, description="The tag's key.")


def _note_answer(run) -> dict:
    note, html = annotations.run_note(run)
    return {
        "body": note.body if note else "",
        "html": html,
        "edited_by": note.edited_by.get_username() if note and note.edited_by else None,
        "updated": note.updated if note else None,
    }


# --- tags -------------------------------------------------------------------------------------------------


@extend_schema_view(
    get=extend_schema(
        operation_id="run_tag_list",
        summary="A run's tags",
        responses={200: TagSerializer(many=True), **ERRORS},
    )
)
class RunTags(generics.ListAPIView):
    """A run's tags by key: labels (an empty value) and key → value tags."""

    serializer_class = TagSerializer
    queryset = RunTag.objects.none()  # the model, for the schema; get_queryset scopes it

    def get_queryset(self):
        run = run_for(project_for(self.request, self.kwargs["slug"]), self.kwargs["run_id"])
        return RunTag.objects.filter(run=run).order_by("key")

    @extend_schema(
        operation_id="run_tag_set",
        summary="Tag a run (reviewers, the project's tokens)",
        request=TagIn,
        examples=[examples.TAG],
        responses={200: TagSerializer, 201: TagSerializer, **ERRORS, **UNSUPPORTED_MEDIA_TYPE},
        description="201 with a new tag, 200 when the run had the key (its value is replaced).",
    )
    def post(self, request, slug: str, run_id: str):
        run = run_for(project_for(request, slug, role=Role.REVIEWER), run_id)
        form = TagIn(data=request.data)
        form.is_valid(raise_exception=True)
        had = RunTag.objects.filter(run=run, key=form.validated_data["key"]).exists()
        tag = services.set_tag(run, by=actor_of(request), **form.validated_data)
        return Response(
            TagSerializer(tag).data, status=status.HTTP_200_OK if had else status.HTTP_201_CREATED
        )


class RunTagDetail(APIView):
    @extend_schema(
        operation_id="run_tag_remove",
        summary="Take a tag off a run (reviewers, the project's tokens)",
        parameters=[KEY],
        responses={204: OpenApiResponse(description="Removed."), **ERRORS},
    )
    def delete(self, request, slug: str, run_id: str, key: str):
        run = run_for(project_for(request, slug, role=Role.REVIEWER), run_id)
        if not services.remove_tag(run, key=key, by=actor_of(request)):
            raise NotFound(f"The run has no tag {key[:100]!r}.")
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- the note ---------------------------------------------------------------------------------------------


class RunNoteView(APIView):
    @extend_schema(
        operation_id="run_note_read", summary="A run's note", responses={200: NoteSerializer, **ERRORS}
    )
    def get(self, request, slug: str, run_id: str):
        return Response(_note_answer(run_for(project_for(request, slug), run_id)))

    @extend_schema(
        operation_id="run_note_write",
        summary="Write a run's note (reviewers, signed in)",
        request=NoteIn,
        examples=[examples.NOTE],
        responses={200: NoteSerializer, **ERRORS, **UNSUPPORTED_MEDIA_TYPE},
    )
    def put(self, request, slug: str, run_id: str):
        run = run_for(project_for_person(request, slug, role=Role.REVIEWER, doing=WRITE), run_id)
        form = NoteIn(data=request.data)
        form.is_valid(raise_exception=True)
        services.save_note(run, by=request.user, body=form.validated_data["body"])
        return Response(_note_answer(run))


# --- comments ---------------------------------------------------------------------------------------------


class _Thread(generics.ListAPIView):
    """The comments on one subject (a run, a submission), oldest first; a person with the reviewer role
    adds one."""

    serializer_class = CommentSerializer
    queryset = Comment.objects.none()  # the model, for the schema; get_queryset scopes it

    def subject(self, project) -> dict:
        raise NotImplementedError

    def get_queryset(self):
        return annotations.thread(**self.subject(project_for(self.request, self.kwargs["slug"])))

    def post(self, request, **kwargs):
        project = project_for_person(request, kwargs["slug"], role=Role.REVIEWER, doing=WRITE)
        subject = self.subject(project)  # 404 before the body is read
        form = CommentIn(data=request.data)
        form.is_valid(raise_exception=True)
        comment = services.add_comment(by=request.user, body=form.validated_data["body"], **subject)
        comment.html = annotations.comment_html(comment)
        return Response(CommentSerializer(comment).data, status=status.HTTP_201_CREATED)


class _Comment(APIView):
    def subject(self, project) -> dict:
        raise NotImplementedError

    def _comment(self, request, role: str, **kwargs) -> Comment:
        project = project_for_person(request, kwargs["slug"], role=role, doing=WRITE)
        return get_object_or_404(
            Comment.objects.select_related("project", "author", "run", "submission__run"),
            pk=kwargs["comment_id"],
            **self.subject(project),
        )

    def patch(self, request, **kwargs):
        comment = self._comment(request, Role.REVIEWER, **kwargs)
        form = CommentIn(data=request.data)
        form.is_valid(raise_exception=True)
        comment = services.edit_comment(comment, by=request.user, body=form.validated_data["body"])
        comment.html = annotations.comment_html(comment)
        return Response(CommentSerializer(comment).data)

    def delete(self, request, **kwargs):
        services.delete_comment(self._comment(request, Role.REVIEWER, **kwargs), by=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


THREAD_GET = {"responses": {200: CommentSerializer(many=True), **ERRORS}}
THREAD_POST = {
    "request": CommentIn,
    "examples": [examples.COMMENT],
    "responses": {201: CommentSerializer, **ERRORS, **UNSUPPORTED_MEDIA_TYPE},
    "description": "`@username` of a member of the project puts the comment in their inbox (once per person, "
    "however often the comment is edited).",
}
COMMENT_PATCH = {
    "request": CommentIn,
    "examples": [examples.COMMENT],
    "responses": {200: CommentSerializer, **ERRORS, **UNSUPPORTED_MEDIA_TYPE},
    "description": "Its author only. Members it now @mentions for the first time are notified.",
}
COMMENT_DELETE = {
    "responses": {
        204: OpenApiResponse(description="Deleted: it stays in the thread, without its text."),
        **ERRORS,
    },
    "description": "Its author, or an admin of the project.",
}


@extend_schema_view(
    get=extend_schema(operation_id="run_comment_list", summary="Comments on a run", **THREAD_GET),
    post=extend_schema(operation_id="run_comment_add", summary="Comment on a run (reviewers)", **THREAD_POST),
)
class RunComments(_Thread):
    def subject(self, project) -> dict:
        return {"run": run_for(project, self.kwargs["run_id"])}


@extend_schema_view(
    patch=extend_schema(
        operation_id="run_comment_edit", summary="Edit your comment on a run", **COMMENT_PATCH
    ),
    delete=extend_schema(
        operation_id="run_comment_delete", summary="Delete a comment on a run", **COMMENT_DELETE
    ),
)
class RunComment(_Comment):
    def subject(self, project) -> dict:
        return {"run": run_for(project, self.kwargs["run_id"])}


def _submission(project, submission_id: int) -> Submission:
    return get_object_or_404(
        Submission.objects.select_related("run", "project"), project=project, pk=submission_id
    )


@extend_schema_view(
    get=extend_schema(
        operation_id="submission_comment_list", summary="Comments on a submission", **THREAD_GET
    ),
    post=extend_schema(
        operation_id="submission_comment_add", summary="Comment on a submission (reviewers)", **THREAD_POST
    ),
)
class SubmissionComments(_Thread):
    def subject(self, project) -> dict:
        return {"submission": _submission(project, self.kwargs["submission_id"])}


@extend_schema_view(
    patch=extend_schema(
        operation_id="submission_comment_edit", summary="Edit your comment on a submission", **COMMENT_PATCH
    ),
    delete=extend_schema(
        operation_id="submission_comment_delete", summary="Delete a comment on a submission", **COMMENT_DELETE
    ),
)
class SubmissionComment(_Comment):
    def subject(self, project) -> dict:
        return {"submission": _submission(project, self.kwargs["submission_id"])}
