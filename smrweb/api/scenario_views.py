"""Scenario preflight over the API: the checks run on a Celery worker, because "present on the worker"
is about the machine that runs validators, not the web process."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.response import Response
from rest_framework.views import APIView

from smrweb.api.views import ERROR, ERRORS
from smrweb.sources import tasks
from smrweb.tracking.models import Scenario


class PreflightCheckSerializer(serializers.Serializer):
    name = serializers.CharField()
    group = serializers.ChoiceField(choices=["complete", "consistent", "worker"])
    ok = serializers.BooleanField()
    detail = serializers.CharField(help_text="What was found, or exactly what is missing or wrong.")


class PreflightReportSerializer(serializers.Serializer):
    scenario = serializers.CharField(help_text="The scenario's key.")
    ok = serializers.BooleanField(help_text="Every check passed.")
    worker = serializers.CharField(help_text="Host name of the worker that ran the checks.")
    checks = PreflightCheckSerializer(many=True)


class ScenarioPreflight(APIView):
    """Check that a scenario preset is complete and consistent, and that a worker has its required
    toolchains and its validator. Anyone signed in may run it, like reading the scenario."""

    @extend_schema(
        request=None,
        responses={200: PreflightReportSerializer, **ERRORS,
                   503: OpenApiResponse(ERROR, description=f"No worker answered within "
                                                           f"{tasks.PREFLIGHT_TIMEOUT:g} seconds.")},
    )
    def post(self, request, key: str):
        scenario = get_object_or_404(Scenario, key=key)
        try:
            report = tasks.preflight_on_worker(scenario.key)
        except tasks.NoWorkerAnswer as exc:
            body = {"code": "no_worker", "message": f"Preflight runs on a worker, and {exc}; retry shortly.",
                    "errors": []}
            return Response(body, status=503, headers={"Retry-After": "5"})
        if report is None:  # deleted between the lookup and the worker's
            raise NotFound(f"No scenario {key!r}.")
        return Response(PreflightReportSerializer(report).data)
