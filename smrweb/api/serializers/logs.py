"""A run's log over the API: the push's body (documented here; `services.logs` validates it) and
answer, and the lines a reader gets."""

from __future__ import annotations

from rest_framework import serializers

from smrweb.tracking.models import LogLevel, RunLogLine


class LogLineIn(serializers.Serializer):
    text = serializers.CharField(
        help_text="The line. Newlines split it into several lines; colour codes and control characters "
        "(but tab) are removed; past 4,000 characters it is cut and marked."
    )
    level = serializers.CharField(
        required=False,
        help_text="debug, info (default), warning, error, critical (also warn, fatal), or a levelno 1-50.",
    )
    ts = serializers.DateTimeField(required=False, help_text="ISO 8601; default: when it arrives.")
    stream = serializers.CharField(required=False, max_length=200, help_text="e.g. stderr, worker-3.")


class LogBatchIn(serializers.Serializer):
    batch_id = serializers.CharField(
        max_length=200,
        help_text="The client's id of this batch: sending it again keeps nothing new and answers the "
        "first result (retry safely).",
    )
    lines = LogLineIn(many=True, help_text="At most 5,000 lines (after splitting on newlines).")
    stream = serializers.CharField(required=False, max_length=200, help_text="The lines' default stream.")


class LogBatchResultSerializer(serializers.Serializer):
    batch_id = serializers.CharField()
    kept = serializers.IntegerField()
    dropped = serializers.IntegerField(help_text="Lines over the run's cap: counted, not kept.")
    first_seq = serializers.IntegerField(allow_null=True)
    last_seq = serializers.IntegerField(allow_null=True)
    repeat = serializers.BooleanField(help_text="The run had this batch id already: nothing was written.")


class LogLineSerializer(serializers.ModelSerializer):
    level = serializers.SerializerMethodField()
    levelno = serializers.IntegerField(source="level")
    # A plain string in the schema: an enum here would collide with the runs' `source` enum by name.
    source = serializers.CharField(help_text="push or smr (read from an SMR run log archive).")

    class Meta:
        model = RunLogLine
        fields = ["seq", "ts", "level", "levelno", "text", "source", "stream"]

    def get_level(self, line: RunLogLine) -> str:
        return LogLevel.name_of(line.level)


class LogCountsSerializer(serializers.Serializer):
    kept = serializers.IntegerField()
    dropped = serializers.IntegerField()
    warnings = serializers.IntegerField(help_text="Kept lines at warning or worse.")


class LogPageSerializer(serializers.Serializer):
    lines = LogLineSerializer(many=True)
    has_older = serializers.BooleanField()
    has_newer = serializers.BooleanField()
    first_seq = serializers.IntegerField(allow_null=True, help_text="`before=` this for the page before.")
    last_seq = serializers.IntegerField(allow_null=True, help_text="`after=` this for the page after.")
    counts = LogCountsSerializer()
