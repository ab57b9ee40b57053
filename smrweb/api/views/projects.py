"""Projects over the API: list, create, read one."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response
from rest_framework.views import APIView

from smrweb.api import examples
from smrweb.api.access import project_for, visible_projects
from smrweb.api.schema import ERRORS, UNSUPPORTED_MEDIA_TYPE
from smrweb.api.serializers.projects import (
    ProjectCreateSerializer,
    ProjectSerializer,
    SpendByDaySerializer,
    SpendQuerySerializer,
)
from smrweb.sources import smr
from smrweb.tracking import queries, services
from smrweb.tracking.models import ApiToken


class ProjectList(APIView):
    """Projects you can see (a token sees its own). Staff, and users given the permission to add projects,
    create projects and become their admin; binding an SMR project needs the permission to bind sources."""

    @extend_schema(responses={200: ProjectSerializer(many=True), **ERRORS})
    def get(self, request):
        return Response(
            ProjectSerializer(visible_projects(request).select_related("scenario"), many=True).data
        )

    @extend_schema(
        request=ProjectCreateSerializer,
        examples=[examples.PROJECT],
        responses={201: ProjectSerializer, **ERRORS, **UNSUPPORTED_MEDIA_TYPE},
    )
    def post(self, request):
        if isinstance(request.auth, ApiToken):
            raise PermissionDenied("Project tokens cannot create projects; sign in as a user.")
        if not services.may_create_projects(request.user):  # before validation: field errors tell nothing
            raise PermissionDenied(
                "Creating projects is for staff and users given the permission to add projects."
            )
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


class ProjectSpend(APIView):
    @extend_schema(
        parameters=[SpendQuerySerializer],
        responses={200: SpendByDaySerializer, **ERRORS},
        description="What the project's agent turns cost per day (of `tz`'s clock) and model over the last "
        "`days` days up to today: read from the spend kept per run, model and quarter hour, not the turns.",
    )
    def get(self, request, slug: str):
        project = project_for(request, slug)
        params = SpendQuerySerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        spend = queries.project_spend_by_day(
            project, params.validated_data["tz"], params.validated_data["days"]
        )
        return Response(
            SpendByDaySerializer(
                {
                    "tz": spend.zone,
                    "days": spend.days,
                    "models": spend.models,
                    "usd": spend.usd,
                    "turns": spend.turns,
                    "unpriced_turns": spend.unpriced,
                    "total_usd": spend.total_usd,
                }
            ).data
        )
