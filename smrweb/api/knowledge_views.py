"""The carry-forward block over the API: what the next run's kickoff message should carry, as data and
as the same text the knowledge page offers to copy (see `tracking.queries.carry_forward`)."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from smrweb.api.access import project_for
from smrweb.api.schema import ERRORS
from smrweb.tracking import queries


class CarryForwardArenaSerializer(serializers.Serializer):
    source = serializers.CharField(help_text="`result` (an arena result) or `entry` (an arena_delta entry written "
                                             "by hand, newer than the latest result).")
    at = serializers.DateTimeField()
    arena = serializers.CharField()
    rank = serializers.IntegerField(allow_null=True)
    arena_score = serializers.FloatField(allow_null=True)
    delta = serializers.FloatField(allow_null=True, help_text="Against the previous recorded result.")
    delta_best = serializers.FloatField(allow_null=True, help_text="Against the best recorded result before it.")
    note = serializers.CharField()
    submission_id = serializers.IntegerField(allow_null=True)
    submission_score = serializers.FloatField(allow_null=True)
    run = serializers.CharField(allow_null=True)


class CarryForwardBestSerializer(serializers.Serializer):
    submission_id = serializers.IntegerField()
    score = serializers.FloatField()
    run = serializers.CharField()
    status = serializers.CharField()
    ts = serializers.DateTimeField()
    approach = serializers.CharField(help_text="The experiment's title, hypothesis or id, if the score named one.")
    harness_id = serializers.CharField()
    artifact_path = serializers.CharField()
    artifact_sha256 = serializers.CharField(help_text="The first 12 hex digits; empty when unknown.")
    commit = serializers.CharField()
    arena = CarryForwardArenaSerializer(allow_null=True, help_text="This submission's latest arena result.")


class CarryForwardItemSerializer(serializers.Serializer):
    reasons = serializers.ListField(child=serializers.ChoiceField(
        choices=["invalid", "rejected", "regressed", "failed_approach", "arena_regressed"]))
    title = serializers.CharField()
    score = serializers.FloatField(allow_null=True)
    run = serializers.CharField(allow_null=True)
    submission_id = serializers.IntegerField(allow_null=True)
    entry_id = serializers.IntegerField(allow_null=True)
    why = serializers.CharField()
    at = serializers.DateTimeField()


class CarryForwardSerializer(serializers.Serializer):
    project = serializers.CharField()
    best = CarryForwardBestSerializer(allow_null=True)
    failed = CarryForwardItemSerializer(many=True)
    arena = CarryForwardArenaSerializer(allow_null=True)
    text = serializers.CharField(help_text="The block rendered as plain text / light markdown, ready to paste.")


class CarryForward(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("n", OpenApiTypes.INT, description="How many failed or regressed approaches "
                                     "(1–20, default 3).")],
        responses={200: CarryForwardSerializer, **ERRORS},
        description="Best so far, the last n failed or regressed approaches with their scores and why, and the "
                    "latest arena feedback — as data and as `text`, for the next run's kickoff message.",
        examples=[OpenApiExample("A project with no history yet", response_only=True, value={
            "project": "hill", "best": None, "failed": [], "arena": None,
            "text": "## Carry-forward: hill (maximize score)\n\n**Best so far:** no valid score yet.\n\n"
                    "**Last 3 failed or regressed approaches** (newest first):\nnone recorded.\n\n"
                    "**Latest arena feedback:** none yet."})],
    )
    def get(self, request, slug: str):
        project = project_for(request, slug)
        n = queries.parse_n(request.query_params.get("n"))
        return Response(CarryForwardSerializer(queries.carry_forward(project, n)).data)
