"""Projects: the answer, and what creating one takes."""

from __future__ import annotations

from rest_framework import serializers

from smrweb.tracking.models import Project, Scenario, SourceKind


class ProjectSerializer(serializers.ModelSerializer):
    scenario = serializers.SlugRelatedField(slug_field="key", queryset=Scenario.objects.all(), required=False)
    stall_after_seconds = serializers.SerializerMethodField()
    # Always present (the schema says so): "" for push projects, whose settings have no SMR id.
    smr_project_id = serializers.CharField(
        source="source_settings.smr_project_id", read_only=True, default=""
    )

    class Meta:
        model = Project
        fields = ["slug", "name", "scenario", "source", "smr_project_id", "stall_after_seconds", "created"]
        read_only_fields = ["source", "created"]

    def get_stall_after_seconds(self, project: Project) -> int:
        return int(project.stall_after.total_seconds())


class ProjectCreateSerializer(serializers.Serializer):
    slug = serializers.SlugField(max_length=100)
    name = serializers.CharField(max_length=200, required=False, allow_blank=True)
    scenario = serializers.SlugRelatedField(slug_field="key", queryset=Scenario.objects.all(), required=False)
    source = serializers.ChoiceField(choices=SourceKind.choices, default=SourceKind.PUSH)
    smr_project_id = serializers.CharField(max_length=200, required=False, default="")
    smr_api_key = serializers.CharField(
        max_length=1000,
        required=False,
        default="",
        write_only=True,
        help_text="The SMR API key this project polls with (stored sealed, never shown). Required unless you "
        "are staff: the operator's key is not lent to user-created projects.",
    )
    smr_backend_base = serializers.URLField(
        max_length=1000,
        required=False,
        default="",
        help_text="The SMR backend address, if not the operator's; it must be a public address.",
    )
    allow_shared_smr_project = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Staff only: bind an SMR project id that another smrweb project is already bound to.",
    )
    check_connection = serializers.BooleanField(
        required=False,
        default=True,
        help_text="source smr: ask the backend whether the key may read the SMR project before creating "
        "(a wrong id, key or address is a 400 naming the field). False: bind without asking, e.g. "
        "before the backend is reachable.",
    )


MAX_SPEND_DAYS = 366


class SpendQuerySerializer(serializers.Serializer):
    """`GET …/spend` parameters."""

    days = serializers.IntegerField(min_value=1, max_value=MAX_SPEND_DAYS, default=30)
    tz = serializers.CharField(
        default="UTC", max_length=64, help_text="An IANA time zone, e.g. Europe/Paris."
    )

    def validate_tz(self, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise serializers.ValidationError(f"Unknown time zone {value!r}: use an IANA name.") from None
        return value


class SpendByDaySerializer(serializers.Serializer):
    """A project's turns' cost per day of the clock `tz`, per model (each list has one value per day)."""

    tz = serializers.CharField()
    days = serializers.ListField(child=serializers.DateField())
    models = serializers.ListField(child=serializers.CharField(), help_text="Most expensive first.")
    usd = serializers.DictField(child=serializers.ListField(child=serializers.DecimalField(18, 6)))
    turns = serializers.DictField(child=serializers.ListField(child=serializers.IntegerField()))
    unpriced_turns = serializers.DictField(
        child=serializers.ListField(child=serializers.IntegerField()),
        help_text="Turns the price table could not price (not in `usd`), per model and day.",
    )
    total_usd = serializers.DecimalField(18, 6)
