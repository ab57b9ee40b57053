"""Runs: the run with its spend, its settings, its agent turns and its metric series."""

from __future__ import annotations

from rest_framework import serializers

from smrweb.api.serializers.annotations import TagSerializer
from smrweb.tracking import queries
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.models import AgentTurn, Run, RunParam, RunTag, clean_text
from smrweb.tracking.queries.views import cells
from smrweb.tracking.services.annotations import DISPLAY_NAME_MAX


class SpendPartSerializer(serializers.Serializer):
    tokens_in = serializers.IntegerField()
    tokens_out = serializers.IntegerField()
    usd = serializers.DecimalField(max_digits=18, decimal_places=6)


class SourcePartSerializer(serializers.Serializer):
    usd = serializers.DecimalField(max_digits=18, decimal_places=6, allow_null=True)
    tokens_in = serializers.IntegerField(allow_null=True)
    tokens_out = serializers.IntegerField(allow_null=True)


class SourceSpendSerializer(serializers.Serializer):
    """What a polled run's source states in its own typed aggregates (null: it did not say)."""

    total_usd = serializers.DecimalField(
        max_digits=18,
        decimal_places=6,
        allow_null=True,
        help_text="Everything the source bills for the run, all meters.",
    )
    inference_usd = serializers.DecimalField(max_digits=18, decimal_places=6, allow_null=True)
    other_usd = serializers.DecimalField(max_digits=18, decimal_places=6)
    tokens_in = serializers.IntegerField(allow_null=True)
    tokens_out = serializers.IntegerField(allow_null=True)
    driver = SourcePartSerializer(allow_null=True)
    child = SourcePartSerializer(allow_null=True)
    unknown = SourcePartSerializer(
        allow_null=True, help_text="Actors the source bills whose role it states nowhere (null: none)."
    )
    roles_unknown = serializers.ListField(
        child=serializers.CharField(), help_text="Their actor ids: their turns are `role_unknown`."
    )
    entries_unreadable = serializers.IntegerField(help_text="Usage entries the poller could not read.")
    timeline_as_of = serializers.DateTimeField(
        allow_null=True, help_text="When the usage entries were last read."
    )
    checked_at = serializers.DateTimeField(allow_null=True)


class SpendSerializer(SpendPartSerializer):
    """`tokens_in`, `tokens_out`, `usd` and the split are the sums of the run's turns. For polled runs,
    `billed_usd` and `source` are the source's own totals, and `unaccounted` names, per channel, what the
    source reports that no turn accounts for (negative: the turns show more); empty when they agree."""

    driver_inference = SpendPartSerializer()
    child_work = SpendPartSerializer()
    role_unknown = SpendPartSerializer(
        help_text="Turns of actors whose role no source states: neither driver nor child (total = all three)."
    )
    billed_usd = serializers.DecimalField(max_digits=18, decimal_places=6, allow_null=True)
    unpriced_turns = serializers.IntegerField(
        help_text="Turns with tokens and no stated cost whose model the price table has no price for (at "
        "the turn's time): counted in the tokens, not in `usd` (0 when every turn is priced)."
    )
    unpriced_models = serializers.DictField(
        child=serializers.IntegerField(), help_text="Those turns by model name (as the source sent it)."
    )
    source = SourceSpendSerializer(allow_null=True)
    unaccounted = serializers.DictField(
        child=serializers.CharField(),
        help_text="Channel → difference: tokens_in, tokens_out (integers), usd (inference, USD), driver_usd, "
        "child_usd, driver_/child_/unknown_tokens_in/out, unknown_usd, and role_unknown_tokens_in/out / "
        "role_unknown_usd (turns neither side of the split accounts for).",
    )


class ModelSpendSerializer(serializers.Serializer):
    model = serializers.CharField(help_text="As the source named it; `(no model)` for turns that named none.")
    usd = serializers.DecimalField(max_digits=18, decimal_places=6)
    turns = serializers.IntegerField()
    tokens_in = serializers.IntegerField()
    tokens_out = serializers.IntegerField()
    unpriced_turns = serializers.IntegerField(help_text="Of `turns`, those the price table could not price.")


class RunDetailSpendSerializer(SpendSerializer):
    by_model = ModelSpendSerializer(
        many=True,
        help_text="The turns' spend per model, most expensive first: sums to `usd`, `tokens_in`, "
        "`tokens_out` and the run's turn count.",
    )


class ParamSerializer(serializers.ModelSerializer):
    class Meta:
        model = RunParam
        fields = ["key", "value"]


class RunFailureSerializer(serializers.Serializer):
    family = serializers.CharField()
    detail = serializers.CharField()
    source = serializers.CharField()


class RunSerializer(serializers.ModelSerializer):
    stalled = serializers.BooleanField(source="is_stalled")
    downgraded = serializers.BooleanField(source="is_downgraded")
    failure = serializers.SerializerMethodField()
    spend = serializers.SerializerMethodField()
    budget_used_fraction = serializers.FloatField(allow_null=True)
    over_budget = serializers.BooleanField(
        source="is_over_budget",
        help_text="Spend above the USD budget or tokens (in + out) above the token budget, "
        "against the source's own totals where it states them.",
    )
    over_budget_on = serializers.SerializerMethodField(
        help_text="Which budgets are exceeded: `usd`, `tokens`, both or none."
    )
    downgraded_actors = serializers.ListField(
        child=serializers.DictField(child=serializers.CharField()),
        read_only=True,
        help_text="Roles or actors that got another profile than they asked for: actor, role, requested, "
        "actual.",
    )
    display_name = serializers.CharField(help_text="What people call the run; empty: its external id.")
    pinned = serializers.BooleanField(help_text="Pinned runs come first in the project's runs.")
    tags = TagSerializer(many=True, read_only=True, help_text="Labels (empty value) and key → value tags.")
    params = ParamSerializer(
        many=True, read_only=True, help_text="The run's params (MLflow's): key → value, each logged once."
    )
    parent = serializers.CharField(
        source="parent.external_id",
        allow_null=True,
        default=None,
        read_only=True,
        help_text="The run this one was started from (Start the next run); null for none.",
    )

    class Meta:
        model = Run
        fields = [
            "external_id",
            "display_name",
            "pinned",
            "tags",
            "params",
            "state",
            "stalled",
            "stalled_since",
            "failure",
            "requested_profile",
            "actual_profile",
            "downgraded",
            "downgraded_actors",
            "budget_usd",
            "budget_tokens",
            "budget_used_fraction",
            "over_budget",
            "over_budget_on",
            "spend",
            "turn_count",
            "failed_turns",
            "best_score",
            "latest_score",
            "score_count",
            "results_complete",
            "results_missing",
            "git_branch",
            "git_commit",
            "parent",
            "started_at",
            "finished_at",
            "last_progress_at",
            "last_polled_at",
            "archived_at",
        ]
        read_only_fields = ["archived_at"]
        extra_kwargs = {
            "best_score": {
                "help_text": "The run's best of its scores that count: not invalid, rejected or excluded "
                "(unverified ones count here; the project's best counts verified ones)."
            },
            "latest_score": {
                "help_text": "The run's latest score that counts, by the rule `best_score` reads; a newer "
                "one that does not count is in the submissions list (`counts: false`)."
            },
            "results_complete": {
                "help_text": "False when some of the run's results could not be read from its source by any "
                "way it offers (docs/smr.md#results): `best_score` is then the best of those read."
            },
            "results_missing": {
                "help_text": "How many of the run's results could not be read; null when all were, or "
                "when the source does not say how many it holds."
            },
        }

    def get_over_budget_on(self, run: Run) -> list[str]:
        return [o["budget"] for o in run.budget_overruns]

    def get_failure(self, run: Run) -> RunFailureSerializer(allow_null=True):  # type: ignore[valid-type]
        if not run.failure_family and not run.failure_detail:
            return None
        return {"family": run.failure_family, "detail": run.failure_detail, "source": run.failure_source}

    def to_representation(self, run: Run) -> dict:
        data = super().to_representation(run)
        columns = self.context.get("columns")
        if columns:  # `?col=`: the chosen columns, by their spec, in order (read with the runs)
            data["columns"] = {c.spec: c.plain(value) for c, value in cells(run, columns)}
        return data

    def get_spend(self, run: Run) -> SpendSerializer:  # type: ignore[valid-type]
        def part(prefix: str) -> dict:
            return {
                "tokens_in": getattr(run, f"{prefix}tokens_in"),
                "tokens_out": getattr(run, f"{prefix}tokens_out"),
                "usd": str(getattr(run, f"{prefix}cost_usd")),
            }

        spend = run.source_spend or {}
        source = None
        if spend:
            source = {
                k: spend.get(k)
                for k in (
                    "total_usd",
                    "inference_usd",
                    "tokens_in",
                    "tokens_out",
                    "driver",
                    "child",
                    "unknown",
                    "timeline_as_of",
                    "checked_at",
                )
            }
            source["other_usd"] = spend.get("other_usd") or "0"
            source["roles_unknown"] = spend.get("roles_unknown") or []
            source["entries_unreadable"] = run.entries_unreadable
        return {
            **part(""),
            "driver_inference": part("driver_"),
            "child_work": part("child_"),
            "role_unknown": part("unknown_"),
            "billed_usd": None if run.source_total_usd is None else str(run.source_total_usd),
            "unpriced_turns": run.unpriced_turns,
            "unpriced_models": run.unpriced_models or {},
            "source": source,
            "unaccounted": {k: str(v) for k, v in run.unaccounted.items()},
        }


class RunDetailSerializer(RunSerializer):
    """One run: as in the list, with its spend by model."""

    spend = serializers.SerializerMethodField()

    def get_spend(self, run: Run) -> RunDetailSpendSerializer:  # type: ignore[valid-type]
        by_model = [vars(m) for m in queries.run_spend_by_model(run)]
        return {**super().get_spend(run), "by_model": ModelSpendSerializer(by_model, many=True).data}


class RunSettingsSerializer(serializers.Serializer):
    budget_usd = serializers.DecimalField(
        max_digits=18, decimal_places=6, min_value=0, max_value=10**12 - 1, required=False, allow_null=True
    )
    budget_tokens = serializers.IntegerField(
        min_value=0, max_value=2**63 - 1, required=False, allow_null=True
    )
    requested_profile = serializers.CharField(max_length=200, required=False, allow_blank=True)
    actual_profile = serializers.CharField(max_length=200, required=False, allow_blank=True)
    git_branch = serializers.CharField(max_length=200, required=False, allow_blank=True)
    git_commit = serializers.CharField(max_length=64, required=False, allow_blank=True)


class RunPatchSerializer(RunSettingsSerializer):
    """A run's settings (admins) and its labels (reviewers): any of them, in one PATCH."""

    display_name = serializers.CharField(
        max_length=DISPLAY_NAME_MAX,
        required=False,
        allow_blank=True,
        help_text="Shown instead of the external id on pages (which still show it); empty clears it.",
    )
    pinned = serializers.BooleanField(required=False, help_text="Pinned runs come first in the runs table.")

    def validate_display_name(self, value: str) -> str:
        # The service's rule, checked before any setting of the same request is written.
        try:
            value = clean_text("display_name", value, limit=DISPLAY_NAME_MAX)
        except InvalidInput as exc:
            raise serializers.ValidationError(exc.message) from None
        if "\n" in value or "\r" in value:
            raise serializers.ValidationError("A display name is one line.")
        return value


class TurnSerializer(serializers.ModelSerializer):
    class Meta:
        model = AgentTurn
        fields = [
            "event_id",
            "turn",
            "actor",
            "parent_actor",
            "kind",
            "model",
            "tokens_in",
            "tokens_out",
            "tokens_cached_in",
            "tokens_cache_write",
            "tokens_reasoning",
            "cost_usd",
            "cost_origin",
            "tool_calls",
            "duration_ms",
            "failed",
            "error",
            "http_status",
            "error_message",
            "ts",
        ]


class TurnWithBodySerializer(TurnSerializer):
    """A turn with its stored prompt and response (`?bodies=1`): null when none is stored; a text over the
    cap ends in its cut marker, and `*_cut` says how many bytes were cut."""

    prompt = serializers.CharField(source="body.prompt", read_only=True, allow_null=True)
    response = serializers.CharField(source="body.response", read_only=True, allow_null=True)
    prompt_bytes = serializers.IntegerField(source="body.prompt_bytes", read_only=True, allow_null=True)
    response_bytes = serializers.IntegerField(source="body.response_bytes", read_only=True, allow_null=True)
    prompt_cut = serializers.IntegerField(source="body.prompt_cut", read_only=True, allow_null=True)
    response_cut = serializers.IntegerField(source="body.response_cut", read_only=True, allow_null=True)

    class Meta(TurnSerializer.Meta):
        fields = [
            *TurnSerializer.Meta.fields,
            "prompt",
            "response",
            "prompt_bytes",
            "response_bytes",
            "prompt_cut",
            "response_cut",
        ]

    def to_representation(self, instance):
        data = super().to_representation(instance)
        for name in ("prompt", "response"):
            if not data[name] and not data[f"{name}_bytes"]:  # none sent: null, not ""
                data[name] = None
        return data


class MetricPointSerializer(serializers.Serializer):
    step = serializers.IntegerField()
    value = serializers.FloatField()
    min = serializers.FloatField()
    max = serializers.FloatField()
    count = serializers.IntegerField()


class MetricSeriesSerializer(serializers.Serializer):
    key = serializers.CharField()
    total_points = serializers.IntegerField()
    downsampled = serializers.BooleanField()
    points = MetricPointSerializer(many=True)


class MetricKeysSerializer(serializers.Serializer):
    keys = serializers.ListField(child=serializers.CharField())


class RunCloseIn(serializers.Serializer):
    reason = serializers.CharField(
        max_length=5000, help_text="Why the run is abandoned: what happened to its harness (required)."
    )


# --- the runs as a flat CSV: one value per cell, so a spreadsheet can sum and filter them -----------------

# The JSON answer's nested fields, each replaced in the CSV by flat columns at its place.
FLAT_SPEND = (
    "spend_usd",  # what the runs table's Spend shows: billed where the source bills, else the turns' cost
    "billed_usd",
    "turn_usd",
    "tokens_in",  # the source's totals where it states them, else the turns' (as the token budget reads)
    "tokens_out",
    "driver_usd",
    "driver_tokens_in",
    "driver_tokens_out",
    "child_usd",
    "child_tokens_in",
    "child_tokens_out",
    "other_usd",
    "unpriced_turns",
)
FLAT_FAILURE = ("failure_family", "failure_detail", "failure_source")
TAG_COLUMN, PARAM_COLUMN, COLUMN_PREFIX = "tag.", "param.", "col."
LABEL = "true"  # a tag without a value (a label), in its column


def flat_run_table(queryset, serializer: RunSerializer):
    """(header, rows) of the runs CSV: the JSON answer's fields with `spend` and `failure` spread over
    columns, `over_budget_on` and `downgraded_actors` as text, and one column per tag key (`tag.<key>`)
    and per param key (`param.<key>`) of the exported runs. The keys are read first, in one query each
    over the filtered runs (keys only); the rows are then streamed as the JSON export streams them."""
    runs = queryset.values("pk")
    tag_keys = list(
        RunTag.objects.filter(run__in=runs).order_by("key").values_list("key", flat=True).distinct()
    )
    param_keys = list(
        RunParam.objects.filter(run__in=runs).order_by("key").values_list("key", flat=True).distinct()
    )
    header: list[str] = []
    for name in serializer.fields:
        if name == "spend":
            header += FLAT_SPEND
        elif name == "failure":
            header += FLAT_FAILURE
        elif name not in ("tags", "params"):
            header.append(name)
    header += [TAG_COLUMN + k for k in tag_keys] + [PARAM_COLUMN + k for k in param_keys]
    header += [COLUMN_PREFIX + c.spec for c in serializer.context.get("columns") or ()]  # `?col=`, in order

    def row(run: Run) -> dict:
        data = serializer.to_representation(run)
        tokens_in, tokens_out = run.reported_tokens
        data.update(
            spend_usd=run.spend_usd,
            billed_usd=run.source_total_usd,
            turn_usd=run.cost_usd,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            driver_usd=run.driver_cost_usd,
            driver_tokens_in=run.driver_tokens_in,
            driver_tokens_out=run.driver_tokens_out,
            child_usd=run.child_cost_usd,
            child_tokens_in=run.child_tokens_in,
            child_tokens_out=run.child_tokens_out,
            other_usd=run.other_meters_usd,
            unpriced_turns=run.unpriced_turns,
            failure_family=run.failure_family,
            failure_detail=run.failure_detail,
            failure_source=run.failure_source,
            over_budget_on=" ".join(data["over_budget_on"]),
            downgraded_actors="; ".join(
                f"{' '.join(x for x in (a.get('role'), a.get('actor')) if x) or 'actor'}: "
                f"{a.get('requested')} → {a.get('actual')}"
                for a in data["downgraded_actors"]
            ),
        )
        data.update({TAG_COLUMN + t.key: t.value or LABEL for t in run.tags.all()})
        data.update({PARAM_COLUMN + p.key: p.value for p in run.params.all()})
        data.update({COLUMN_PREFIX + spec: value for spec, value in data.pop("columns", {}).items()})
        return data

    return header, (row(run) for run in queryset.iterator(chunk_size=2000))
