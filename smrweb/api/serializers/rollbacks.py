"""Rollbacks: the request and the rollback it made (or the one already in flight)."""

from __future__ import annotations

from rest_framework import serializers

from smrweb.tracking.models import Rollback


class RollbackSerializer(serializers.ModelSerializer):
    run = serializers.CharField(source="run.external_id")
    target_submission = serializers.IntegerField(source="target_submission_id", allow_null=True)
    target_checkpoint = serializers.CharField(
        source="target_checkpoint.external_id", allow_null=True, default=None
    )
    requested_by = serializers.CharField(source="requested_by.get_username")

    class Meta:
        model = Rollback
        fields = [
            "id",
            "run",
            "target_submission",
            "target_checkpoint",
            "reason",
            "status",
            "detail",
            "attempts",
            "requested_by",
            "created",
            "dispatched_at",
            "finished_at",
        ]


class RollbackIn(serializers.Serializer):
    submission = serializers.IntegerField(required=False, allow_null=True, min_value=1)
    checkpoint = serializers.CharField(
        required=False, allow_blank=True, max_length=200, help_text="The checkpoint's external id."
    )
    reason = serializers.CharField(required=False, allow_blank=True, max_length=5000, default="")

    def validate(self, attrs):
        # A malformed request (400), not a conflict with the run's state (409).
        if bool(attrs.get("submission")) == bool(attrs.get("checkpoint")):
            raise serializers.ValidationError({"submission": "Give exactly one of submission or checkpoint."})
        return attrs
