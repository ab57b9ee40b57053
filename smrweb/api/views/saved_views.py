"""A project's saved views of its runs table: list those the caller may open, save one (a person's act),
delete one (its owner, or an admin for a shared one). The runs list reads one with `?view=<id>`."""

from __future__ import annotations

from django.http import Http404, QueryDict
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response
from rest_framework.views import APIView

from smrweb.api import examples
from smrweb.api.access import project_for, project_for_person
from smrweb.api.schema import ERRORS, UNSUPPORTED_MEDIA_TYPE
from smrweb.api.serializers.saved_views import SavedViewIn, SavedViewSerializer
from smrweb.tracking import queries, services
from smrweb.tracking.filters import checked_view_query
from smrweb.tracking.models import ApiToken, Role


def _user(request):
    return None if isinstance(request.auth, ApiToken) else request.user


class SavedViewList(APIView):
    @extend_schema(responses={200: SavedViewSerializer(many=True), **ERRORS})
    def get(self, request, slug: str):
        """The views you may open: shared ones and your own (a project token: the shared ones)."""
        project = project_for(request, slug)
        views = queries.saved_views(project, _user(request))
        return Response(SavedViewSerializer(views, many=True).data)

    @extend_schema(
        request=SavedViewIn,
        examples=[examples.SAVED_VIEW],
        responses={201: SavedViewSerializer, **ERRORS, **UNSUPPORTED_MEDIA_TYPE},
    )
    def post(self, request, slug: str):
        """Save the runs list's query under a name (members; sharing needs the reviewer role)."""
        project = project_for_person(request, slug, role=Role.VIEWER, doing="save views")
        form = SavedViewIn(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        query = checked_view_query(QueryDict(data["query"].lstrip("?")))
        view = services.save_view(
            project, by=request.user, name=data["name"], query=query, shared=data["shared"]
        )
        return Response(SavedViewSerializer(view).data, status=status.HTTP_201_CREATED)


class SavedViewDetail(APIView):
    def _view(self, request, slug: str, view_id: int):
        view = queries.find_view(project_for(request, slug), _user(request), view_id)
        if view is None:
            raise Http404("No such view that you may open.")
        return view

    @extend_schema(responses={200: SavedViewSerializer, **ERRORS})
    def get(self, request, slug: str, view_id: int):
        return Response(SavedViewSerializer(self._view(request, slug, view_id)).data)

    @extend_schema(responses={204: OpenApiResponse(description="Deleted."), **ERRORS})
    def delete(self, request, slug: str, view_id: int):
        project_for_person(request, slug, role=Role.VIEWER, doing="delete views")
        view = self._view(request, slug, view_id)
        if not services.may_delete_view(view, request.user):
            raise PermissionDenied("Only its owner (or an admin, for a shared view) may delete this view.")
        services.delete_view(view, by=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
