"""Scenarios over the API: list, create (staff), read one, and preflight.

Preflight runs on a Celery worker, because "present on the worker" is about the machine that runs
validators, not the web process. Asking answers at once (202) with the address to poll; the web process
never waits on a worker."""

from __future__ import annotations

from django.conf import settings
from django.urls import reverse
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import generics
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.response import Response
from rest_framework.views import APIView

from smrweb import tasks
from smrweb.api import examples
from smrweb.api.access import actor_of, scenario_for, visible_projects
from smrweb.api.errors import rate_limited
from smrweb.api.schema import ERROR, ERRORS, UNSUPPORTED_MEDIA_TYPE
from smrweb.api.serializers.scenarios import (
    PreflightPendingSerializer,
    PreflightReportSerializer,
    ScenarioBoardSerializer,
    ScenarioSerializer,
)
from smrweb.core import ratelimits
from smrweb.tracking import services
from smrweb.tracking.models import Scenario
from smrweb.tracking.queries.scenario_board import scenario_board


@extend_schema_view(
    get=extend_schema(responses={200: ScenarioSerializer(many=True), **ERRORS}),
    post=extend_schema(
        responses={201: ScenarioSerializer, **ERRORS, **UNSUPPORTED_MEDIA_TYPE}, examples=[examples.SCENARIO]
    ),
)
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


@extend_schema_view(get=extend_schema(responses={200: ScenarioBoardSerializer, **ERRORS}))
class ScenarioLeaderboard(APIView):
    """The scenario's leaderboard across projects: each project's best verified submission, ranked in the
    scenario's direction, with its arena rank where recorded. Lists only the projects you may read (a token:
    its own project)."""

    def get(self, request, key: str):
        scenario = scenario_for(request, key)
        projects = list(visible_projects(request).filter(scenario=scenario))
        board = scenario_board(scenario, projects)
        payload = {
            "scenario": scenario.key,
            "direction": scenario.direction,
            "score_metric": scenario.score_metric,
            "projects": board,
        }
        return Response(ScenarioBoardSerializer(payload).data)


# --- preflight ------------------------------------------------------------------------------------

NO_WORKER = OpenApiResponse(
    ERROR,
    description=f"No worker took the preflight within "
    f"{tasks.PREFLIGHT_TIMEOUT:g} seconds, or the queue is down.",
)
TOO_MANY = OpenApiResponse(ERROR, description="Too many preflights from this caller (SMRWEB_PREFLIGHT_RATE).")


def _pending(key: str, request_id: str, status: str) -> Response:
    poll = reverse("api:scenario-preflight-result", args=[key, request_id])
    return Response(
        {"id": request_id, "status": status, "poll": poll},
        status=202,
        headers={"Location": poll, "Retry-After": "1"},
    )


def _no_worker(message: str) -> Response:
    body = {
        "code": "no_worker",
        "message": f"Preflight runs on a worker, and {message}; retry shortly.",
        "errors": [],
    }
    return Response(body, status=503, headers={"Retry-After": "5"})


class ScenarioPreflight(APIView):
    """Ask a worker to check that a scenario is complete and consistent, and that it has the scenario's
    required toolchains and validator. Anyone who may read the scenario may ask, a few times a minute."""

    @extend_schema(
        request=None, responses={202: PreflightPendingSerializer, **ERRORS, 429: TOO_MANY, 503: NO_WORKER}
    )
    def post(self, request, key: str):
        scenario = scenario_for(request, key)
        limited = ratelimits.hit(
            request, group="preflight", rate=settings.SMRWEB_PREFLIGHT_RATE, keys=[ratelimits.by_principal]
        )
        if limited:
            return rate_limited(limited)
        try:
            request_id = tasks.request_preflight(scenario.key)
        except tasks.NoWorkerAnswer as exc:
            return _no_worker(str(exc))
        return _pending(scenario.key, request_id, "pending")


class ScenarioPreflightResult(APIView):
    """A preflight's report once a worker has run it; 202 while it waits or runs."""

    @extend_schema(
        responses={200: PreflightReportSerializer, 202: PreflightPendingSerializer, **ERRORS, 503: NO_WORKER}
    )
    def get(self, request, key: str, request_id: str):
        scenario = scenario_for(request, key)
        try:
            state = tasks.preflight_state(scenario.key, request_id)
        except tasks.NoWorkerAnswer as exc:
            return _no_worker(str(exc))
        if state is None or state["status"] == "gone":  # unknown, expired, or the scenario was deleted
            raise NotFound(f"No preflight {request_id!r} of scenario {key!r}.")
        if state["status"] == "no_worker":
            return _no_worker(f"no worker took it within {tasks.PREFLIGHT_TIMEOUT:g} seconds")
        if state["status"] != "done":
            return _pending(scenario.key, request_id, state["status"])
        return Response(PreflightReportSerializer(state["report"]).data)
