"""Projects over the API: list, create, read one; its spend by day; its spend guards and their dry run."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response
from rest_framework.views import APIView

from smrweb.api import examples
from smrweb.api.access import actor_of, project_for, project_for_person, visible_projects
from smrweb.api.schema import ERRORS, UNSUPPORTED_MEDIA_TYPE
from smrweb.api.serializers.projects import (
    ProjectCreateSerializer,
    ProjectSerializer,
    SpendByDaySerializer,
    SpendGuardAnswer,
    SpendGuardDryRun,
    SpendGuardIn,
    SpendGuardSerializer,
    SpendQuerySerializer,
)
from smrweb.sources import smr
from smrweb.tracking import queries, services
from smrweb.tracking.models import ApiToken, Role
from smrweb.tracking.services.alerts import spend_rule


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


GUARD_FIELDS = tuple(SpendGuardSerializer().fields)


def _guard_answer(project) -> dict:
    values = {name: getattr(project, name) for name in GUARD_FIELDS}
    return SpendGuardAnswer({**values, "day_spend_usd": spend_rule.day_spend(project)}).data


class ProjectSpendGuard(APIView):
    @extend_schema(
        responses={200: SpendGuardAnswer, **ERRORS},
        description="The project's spend guards: the spend-aware stop (off by default) and the day budget "
        "(docs/alerts.md, Spend guards).",
    )
    def get(self, request, slug: str):
        return Response(_guard_answer(project_for(request, slug)))

    @extend_schema(
        request=SpendGuardIn,
        examples=[examples.SPEND_GUARD],
        responses={200: SpendGuardAnswer, **ERRORS, **UNSUPPORTED_MEDIA_TYPE},
        description="Change the spend guards (admins, signed in; audited as project.settings_changed). "
        "Unknown fields and bad values are a 400 naming the field.",
    )
    def patch(self, request, slug: str):
        project = project_for_person(request, slug, role=Role.ADMIN, doing="change the spend guards")
        form = SpendGuardIn(data=request.data)
        form.is_valid(raise_exception=True)
        if form.validated_data:
            services.update_project(project, by=actor_of(request), **form.validated_data)
        project.refresh_from_db()
        return Response(_guard_answer(project))


class ProjectSpendGuardDryRun(APIView):
    @extend_schema(
        parameters=[SpendGuardSerializer],
        responses={200: SpendGuardDryRun, **ERRORS},
        description="What the spend-aware stop would have done over the project's most recently updated "
        "runs (the live rule, asked after every turn), and the day budget over its last 30 days. Query "
        "parameters override the saved values (a preview before saving).",
    )
    def get(self, request, slug: str):
        project = project_for(request, slug)
        params = SpendGuardIn(data=request.query_params.dict())
        params.is_valid(raise_exception=True)
        given = {**{name: getattr(project, name) for name in GUARD_FIELDS}, **params.validated_data}
        given.update(spend_rule.check_spend_guard_settings(params.validated_data))
        limits = spend_rule.Limits(
            usd=given["spend_stop_usd"],
            turns=given["spend_stop_turns"],
            tokens=given["spend_stop_tokens"],
            usd_per_point=given["spend_stop_usd_per_point"],
            window=given["spend_stop_window"],
        )
        dry = spend_rule.project_dry_run(
            project, limits, day_budget=given["day_budget_usd"], zone=given["day_zone"]
        )
        return Response(SpendGuardDryRun(dry).data)
