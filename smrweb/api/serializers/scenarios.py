"""Scenarios and their preflight report."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from smrweb.tracking.models import Scenario


@extend_schema_field(
    {"type": "string", "pattern": r"^([01]\d|2[0-3]):[0-5]\d(:[0-5]\d)?$", "example": "09:30"}
)
class WallClockField(serializers.TimeField):
    """A time of day on some clock of its own ("09:30"): OpenAPI's `time` format wants a zone offset."""

    def __init__(self, **kwargs):
        super().__init__(format="%H:%M", input_formats=["%H:%M", "%H:%M:%S"], **kwargs)


class ScenarioSerializer(serializers.ModelSerializer):
    validator_command = serializers.ListField(child=serializers.CharField(max_length=1000), required=False)
    scoring_command = serializers.ListField(child=serializers.CharField(max_length=1000), required=False)
    required_toolchains = serializers.ListField(child=serializers.CharField(max_length=100), required=False)
    arena_resets_at = WallClockField(
        required=False, help_text="When the arena's day starts, on its own clock (`arena_timezone`): HH:MM."
    )

    class Meta:
        model = Scenario
        fields = [
            "key",
            "name",
            "description",
            "harness_id",
            "artifact_path",
            "artifact_kind",
            "score_metric",
            "direction",
            "score_min",
            "score_max",
            "validator_command",
            "scoring_command",
            "required_toolchains",
            "arena_name",
            "arena_url",
            "arena_direction",
            "arena_daily_limit",
            "arena_timezone",
            "arena_resets_at",
            "shared",
            "created",
            "updated",
        ]
        read_only_fields = ["created", "updated"]
        extra_kwargs = {
            "shared": {
                "help_text": "Any project creator may use a shared scenario; the others "
                "are attached to projects by staff only."
            }
        }

    def validate(self, attrs):
        lo, hi = attrs.get("score_min"), attrs.get("score_max")
        if lo is not None and hi is not None and lo > hi:
            raise serializers.ValidationError({"score_min": "Must not be above score_max."})
        return attrs


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


class PreflightPendingSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="The preflight's id.")
    status = serializers.ChoiceField(
        choices=["pending", "running"], help_text="pending: queued for a worker; running: a worker has it."
    )
    poll = serializers.CharField(help_text="Where to GET the report (202 until it is ready).")


class BoardSubmissionSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    score = serializers.FloatField()
    status = serializers.CharField()
    run = serializers.CharField(source="run.external_id")
    ts = serializers.DateTimeField()


class BoardArenaSerializer(serializers.Serializer):
    arena = serializers.CharField()
    rank = serializers.IntegerField(allow_null=True)
    arena_score = serializers.FloatField(allow_null=True)
    recorded = serializers.DateTimeField(source="created")


class BoardRowSerializer(serializers.Serializer):
    place = serializers.IntegerField(
        allow_null=True, help_text="1 for the leader; ties share a place; null without a verified submission."
    )
    project = serializers.CharField(source="project.slug")
    name = serializers.CharField(source="project.name")
    best = BoardSubmissionSerializer(allow_null=True, help_text="The project's best verified submission.")
    arena = BoardArenaSerializer(allow_null=True, help_text="The newest arena result recorded for `best`.")
    best_arena_rank = serializers.IntegerField(
        allow_null=True, help_text="The best arena rank recorded for any of the project's submissions."
    )


class ScenarioBoardSerializer(serializers.Serializer):
    scenario = serializers.CharField()
    direction = serializers.CharField()
    score_metric = serializers.CharField()
    projects = BoardRowSerializer(many=True)
