"""The carry-forward block (`tracking.queries.carry_forward`) as data."""

from __future__ import annotations

from rest_framework import serializers


class CarryForwardArenaSerializer(serializers.Serializer):
    source = serializers.CharField(
        help_text="`result` (an arena result) or `entry` (an arena_delta entry written "
        "by hand, newer than the latest result)."
    )
    at = serializers.DateTimeField()
    arena = serializers.CharField()
    rank = serializers.IntegerField(allow_null=True)
    arena_score = serializers.FloatField(allow_null=True)
    delta = serializers.FloatField(allow_null=True, help_text="Against the previous recorded result.")
    delta_best = serializers.FloatField(
        allow_null=True, help_text="Against the best recorded result before it."
    )
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
    approach = serializers.CharField(
        help_text="The experiment's title, hypothesis or id, if the score named one."
    )
    harness_id = serializers.CharField()
    artifact_path = serializers.CharField()
    artifact_sha256 = serializers.CharField(help_text="The first 12 hex digits; empty when unknown.")
    commit = serializers.CharField()
    arena = CarryForwardArenaSerializer(allow_null=True, help_text="This submission's latest arena result.")


class CarryForwardItemSerializer(serializers.Serializer):
    reasons = serializers.ListField(
        child=serializers.ChoiceField(
            choices=[
                "invalid",
                "rejected",
                "refused",
                "regressed",
                "failed_approach",
                "arena_regressed",
                "run_failed",
                "run_abandoned",
            ]
        )
    )
    title = serializers.CharField()
    score = serializers.FloatField(allow_null=True)
    run = serializers.CharField(allow_null=True)
    submission_id = serializers.IntegerField(allow_null=True)
    entry_id = serializers.IntegerField(allow_null=True)
    why = serializers.CharField()
    at = serializers.DateTimeField()


class CarryForwardApproachSerializer(serializers.Serializer):
    source = serializers.CharField(help_text="`note` (a run's note) or `comment`.")
    run = serializers.CharField(help_text="The run's external id.")
    run_name = serializers.CharField(help_text="The run's display name; empty without one.")
    submission_id = serializers.IntegerField(allow_null=True, help_text="For a comment on a submission.")
    author = serializers.CharField()
    at = serializers.DateTimeField(help_text="When it was last written.")
    text = serializers.CharField(help_text="As written (Markdown).")


class CarryForwardSerializer(serializers.Serializer):
    project = serializers.CharField()
    best = CarryForwardBestSerializer(allow_null=True)
    failed = CarryForwardItemSerializer(many=True)
    arena = CarryForwardArenaSerializer(allow_null=True)
    approaches = CarryForwardApproachSerializer(
        many=True, help_text="The newest n run notes and comments tagged `#approach`, newest first."
    )
    text = serializers.CharField(
        help_text="The block rendered as plain text / light markdown, ready to paste."
    )
