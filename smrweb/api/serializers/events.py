"""The push ingest's answer (the request body is the event contract, `tracking.events`)."""

from __future__ import annotations

from rest_framework import serializers


class IngestResultSerializer(serializers.Serializer):
    run = serializers.CharField()
    accepted = serializers.IntegerField()
    duplicates = serializers.IntegerField()
    bodies_dropped = serializers.IntegerField(
        required=False,
        help_text="Present when some turns carried a prompt or response that was not stored: the project "
        "does not capture bodies (its settings).",
    )
