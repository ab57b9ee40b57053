"""Steering a run: a runtime message's body, and a steering request as it stands."""

from __future__ import annotations

from rest_framework import serializers

from smrweb.tracking.models import RunControl
from smrweb.tracking.services.control import MESSAGE_MAX


class RunControlSerializer(serializers.ModelSerializer):
    run = serializers.CharField(source="run.external_id")
    requested_by = serializers.CharField(
        source="by_label",
        help_text="The person who asked, or `smrweb (spend guard)` / `smrweb (day budget)`.",
    )
    status = serializers.CharField(
        help_text="requested → dispatched → accepted (the source took it) → confirmed (the source reported "
        "it back: the message among the run's runtime messages, the run paused or running again); or failed."
    )
    detail = serializers.CharField(help_text="Every answer of the source, one timestamped line each.")
    source_ref = serializers.CharField(
        help_text="What the source calls it: SMR's message id or control intent id, or the webhook's "
        "Idempotency-Key."
    )

    class Meta:
        model = RunControl
        fields = [
            "id",
            "run",
            "kind",
            "body",
            "status",
            "detail",
            "source_ref",
            "attempts",
            "requested_by",
            "created",
            "dispatched_at",
            "finished_at",
        ]


class RunMessageIn(serializers.Serializer):
    # Length and blankness are the domain's rules (services.request_control), checked after the role.
    body = serializers.CharField(
        allow_blank=True,
        trim_whitespace=False,
        help_text=f"What the agent is told: 1 to {MESSAGE_MAX:,} characters (surrounding whitespace is "
        "dropped).",
    )
