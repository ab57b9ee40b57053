"""Projects: the answer, and what creating one takes."""

from __future__ import annotations

from rest_framework import serializers

from smrweb.tracking.models import Project, Scenario, SourceKind, SpendStop


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


# --- the spend guards (issue 38 item 4; docs/alerts.md "Spend guards") ------------------------------------

USD_FIELD = {"max_digits": 18, "decimal_places": 6, "allow_null": True, "required": False}


class SpendGuardSerializer(serializers.Serializer):
    """A project's spend guards: the spend-aware stop's action and limits, and the day budget."""

    spend_stop = serializers.ChoiceField(
        choices=SpendStop.choices,
        required=False,
        help_text="off (the default), pause (a stop where the source cannot pause) or stop.",
    )
    spend_stop_usd = serializers.DecimalField(
        **USD_FIELD, help_text="Act on a live run that spent more than this since its best score."
    )
    spend_stop_turns = serializers.IntegerField(
        allow_null=True, required=False, min_value=1, help_text="… or made more turns than this since it."
    )
    spend_stop_tokens = serializers.IntegerField(
        allow_null=True, required=False, min_value=1, help_text="… or used more tokens than this since it."
    )
    spend_stop_usd_per_point = serializers.DecimalField(
        **USD_FIELD,
        help_text="… or spent more than this per point of score gained over its last `spend_stop_window` "
        "turns (a window that gained nothing is past any ceiling).",
    )
    spend_stop_window = serializers.IntegerField(required=False, min_value=1, help_text="Turns (50).")
    day_budget_usd = serializers.DecimalField(
        **USD_FIELD,
        help_text="When the project's turns cost this much in one day of `day_zone`, every live run is "
        "paused (once that day). Null: off.",
    )
    day_zone = serializers.CharField(
        required=False, max_length=64, help_text="The project's clock: an IANA time zone (UTC)."
    )


class SpendGuardAnswer(SpendGuardSerializer):
    day_spend_usd = serializers.DecimalField(
        18, 6, read_only=True, help_text="What the project's turns cost so far today in its clock."
    )


class SpendGuardIn(SpendGuardSerializer):
    """`PATCH …/spend-guard`: the fields to change (unknown fields are refused)."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


class DryRunAct(serializers.Serializer):
    run = serializers.CharField()
    turn = serializers.IntegerField(help_text="The rule would have acted after this turn.")
    at = serializers.DateTimeField()
    reason = serializers.CharField()
    usd_since_best = serializers.DecimalField(18, 6, source="reading.usd")
    turns_since_best = serializers.IntegerField(source="reading.turns")
    spent_after = serializers.DecimalField(18, 6, help_text="What the run spent after that point.")
    improved_after = serializers.BooleanField(help_text="Whether it found a better score later.")


class DryRunDay(serializers.Serializer):
    day = serializers.DateField()
    at = serializers.DateTimeField(help_text="The quarter hour in which the day's spend reached the budget.")
    spent = serializers.DecimalField(18, 6)
    spent_after = serializers.DecimalField(18, 6)


class SpendGuardDryRun(serializers.Serializer):
    """What the rule would have done over the project's history (the live rule, after every turn)."""

    limits = serializers.CharField(source="limits.words")
    runs_read = serializers.IntegerField(help_text="The project's most recently updated runs replayed.")
    acts = DryRunAct(many=True)
    spent_after = serializers.DecimalField(18, 6)
    live_now = serializers.ListField(
        child=serializers.CharField(), help_text="Live runs it would act on now."
    )
    day_budget = serializers.DecimalField(18, 6, allow_null=True)
    zone = serializers.CharField()
    days = DryRunDay(many=True)
    runs_skipped = serializers.ListField(
        child=serializers.CharField(), help_text="Runs too long to replay here (over 20,000 turns)."
    )
