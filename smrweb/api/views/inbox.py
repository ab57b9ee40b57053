"""The signed-in person's inbox over the API: their notifications, filtered by kind and project, and
marking them read (some, or every one a filter matches). A person's, never a token's: a project token
has no inbox."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import generics, serializers
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response
from rest_framework.views import APIView

from smrweb.api import examples
from smrweb.api.schema import ERRORS, UNSUPPORTED_MEDIA_TYPE
from smrweb.api.serializers.alerts import InboxItemSerializer, InboxReadIn
from smrweb.tracking import services
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.models import ApiToken, Notification
from smrweb.tracking.queries import alerts

FILTERS = [
    OpenApiParameter("kind", str, description=f"One of: {', '.join(alerts.KINDS)}."),
    OpenApiParameter("project", str, description="A project's slug."),
    OpenApiParameter("unread", bool, description="Unread only."),
]


def _person(request):
    if isinstance(request.auth, ApiToken):
        raise PermissionDenied("Project tokens have no inbox: sign in as the person whose inbox it is.")
    return request.user


class InboxList(generics.ListAPIView):
    """The person's notifications, newest first (alerts and @mentions), from projects they can see."""

    serializer_class = InboxItemSerializer
    queryset = Notification.objects.none()  # the model, for the schema; get_queryset scopes it

    @extend_schema(
        operation_id="inbox_list",
        summary="Your inbox, newest first",
        parameters=FILTERS,
        responses={200: InboxItemSerializer(many=True), **ERRORS},
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        user = _person(self.request)
        filt = alerts.inbox_filter(user, self.request.query_params)  # InvalidInput: 400 naming the field
        return alerts.inbox(user).filter(filt.q())


class InboxRead(APIView):
    @extend_schema(
        operation_id="inbox_mark_read",
        summary="Mark inbox notifications read",
        request=InboxReadIn,
        examples=[examples.INBOX_READ],
        responses={
            200: inline_serializer("InboxMarked", {"marked": serializers.IntegerField()}),
            **ERRORS,
            **UNSUPPORTED_MEDIA_TYPE,
        },
        description="`ids`, or every unread notification matching `kind`, `project` and `unread` (the "
        "whole inbox when none is given), only up to `upto` so that what arrived since stays unread.",
    )
    def post(self, request):
        user = _person(request)
        form = InboxReadIn(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        if "ids" in data:
            if set(data) - {"ids"}:
                raise InvalidInput("ids", "Either ids or a filter (kind, project, unread, upto), not both.")
            return Response({"marked": services.mark_read(user, data["ids"])})
        filt = alerts.inbox_filter(user, {k: v for k, v in data.items() if k != "upto"})
        return Response({"marked": services.mark_read(user, where=filt.q(), upto=data.get("upto"))})
