"""Serializers shape answers and validate non-event input; writes go through tracking.services."""

from __future__ import annotations

from django.urls import reverse
from rest_framework import serializers

from smrweb.tracking.models import (
    AgentTurn,
    Artifact,
    ArtifactKind,
    Project,
    Run,
    Scenario,
    SourceKind,
    Submission,
)


class ScenarioSerializer(serializers.ModelSerializer):
    validator_command = serializers.ListField(child=serializers.CharField(max_length=1000), required=False)
    scoring_command = serializers.ListField(child=serializers.CharField(max_length=1000), required=False)
    required_toolchains = serializers.ListField(child=serializers.CharField(max_length=100), required=False)

    class Meta:
        model = Scenario
        fields = ["key", "name", "description", "harness_id", "artifact_path", "artifact_kind", "score_metric",
                  "direction", "score_min", "score_max", "validator_command", "scoring_command",
                  "required_toolchains", "arena_name", "arena_url", "arena_direction", "shared", "created", "updated"]
        read_only_fields = ["created", "updated"]
        extra_kwargs = {"shared": {"help_text": "Any project creator may use a shared scenario; the others "
                                                "are attached to projects by staff only."}}

    def validate(self, attrs):
        lo, hi = attrs.get("score_min"), attrs.get("score_max")
        if lo is not None and hi is not None and lo > hi:
            raise serializers.ValidationError({"score_min": "Must not be above score_max."})
        return attrs


class ProjectSerializer(serializers.ModelSerializer):
    scenario = serializers.SlugRelatedField(slug_field="key", queryset=Scenario.objects.all(), required=False)
    stall_after_seconds = serializers.SerializerMethodField()
    # Always present (the schema says so): "" for push projects, whose settings have no SMR id.
    smr_project_id = serializers.CharField(source="source_settings.smr_project_id", read_only=True, default="")

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
        max_length=1000, required=False, default="", write_only=True,
        help_text="The SMR API key this project polls with (stored sealed, never shown). Required unless you "
                  "are staff: the operator's key is not lent to user-created projects.")
    smr_backend_base = serializers.URLField(
        max_length=1000, required=False, default="",
        help_text="The SMR backend address, if not the operator's; it must be a public address.")
    allow_shared_smr_project = serializers.BooleanField(
        required=False, default=False,
        help_text="Staff only: bind an SMR project id that another smrweb project is already bound to.")
    check_connection = serializers.BooleanField(
        required=False, default=True,
        help_text="source smr: ask the backend whether the key may read the SMR project before creating "
                  "(a wrong id, key or address is a 400 naming the field). False: bind without asking, e.g. "
                  "before the backend is reachable.")


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

    total_usd = serializers.DecimalField(max_digits=18, decimal_places=6, allow_null=True,
                                         help_text="Everything the source bills for the run, all meters.")
    inference_usd = serializers.DecimalField(max_digits=18, decimal_places=6, allow_null=True)
    other_usd = serializers.DecimalField(max_digits=18, decimal_places=6)
    tokens_in = serializers.IntegerField(allow_null=True)
    tokens_out = serializers.IntegerField(allow_null=True)
    driver = SourcePartSerializer(allow_null=True)
    child = SourcePartSerializer(allow_null=True)
    entries_unreadable = serializers.IntegerField(help_text="Usage entries the poller could not read.")
    timeline_as_of = serializers.DateTimeField(allow_null=True, help_text="When the usage entries were last read.")
    checked_at = serializers.DateTimeField(allow_null=True)


class SpendSerializer(SpendPartSerializer):
    """`tokens_in`, `tokens_out`, `usd` and the split are the sums of the run's turns. For polled runs,
    `billed_usd` and `source` are the source's own totals, and `unaccounted` names, per channel, what the
    source reports that no turn accounts for (negative: the turns show more); empty when they agree."""

    driver_inference = SpendPartSerializer()
    child_work = SpendPartSerializer()
    billed_usd = serializers.DecimalField(max_digits=18, decimal_places=6, allow_null=True)
    source = SourceSpendSerializer(allow_null=True)
    unaccounted = serializers.DictField(
        child=serializers.CharField(),
        help_text="Channel → difference: tokens_in, tokens_out (integers), usd (inference, USD), driver_usd, "
                  "child_usd, driver_/child_tokens_in/out.")


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
        source="is_over_budget", help_text="Spend above the USD budget or tokens (in + out) above the token budget, "
                                           "against the source's own totals where it states them.")
    over_budget_on = serializers.SerializerMethodField(
        help_text="Which budgets are exceeded: `usd`, `tokens`, both or none.")
    downgraded_actors = serializers.ListField(
        child=serializers.DictField(child=serializers.CharField()), read_only=True,
        help_text="Roles or actors that got another profile than they asked for: actor, role, requested, actual.")

    class Meta:
        model = Run
        fields = ["external_id", "state", "stalled", "stalled_since", "failure", "requested_profile",
                  "actual_profile", "downgraded", "downgraded_actors", "budget_usd", "budget_tokens",
                  "budget_used_fraction", "over_budget", "over_budget_on", "spend",
                  "turn_count", "best_score", "latest_score", "score_count", "git_branch", "git_commit",
                  "started_at", "finished_at", "last_progress_at", "last_polled_at"]

    def get_over_budget_on(self, run: Run) -> list[str]:
        return [o["budget"] for o in run.budget_overruns]

    def get_failure(self, run: Run) -> RunFailureSerializer(allow_null=True):  # type: ignore[valid-type]
        if not run.failure_family and not run.failure_detail:
            return None
        return {"family": run.failure_family, "detail": run.failure_detail, "source": run.failure_source}

    def get_spend(self, run: Run) -> SpendSerializer:  # type: ignore[valid-type]
        def part(prefix: str) -> dict:
            return {"tokens_in": getattr(run, f"{prefix}tokens_in"), "tokens_out": getattr(run, f"{prefix}tokens_out"),
                    "usd": str(getattr(run, f"{prefix}cost_usd"))}

        spend = run.source_spend or {}
        source = None
        if spend:
            source = {k: spend.get(k) for k in ("total_usd", "inference_usd", "tokens_in", "tokens_out", "driver",
                                                "child", "timeline_as_of", "checked_at")}
            source["other_usd"] = spend.get("other_usd") or "0"
            source["entries_unreadable"] = run.entries_unreadable
        return {**part(""), "driver_inference": part("driver_"), "child_work": part("child_"),
                "billed_usd": None if run.source_total_usd is None else str(run.source_total_usd),
                "source": source, "unaccounted": {k: str(v) for k, v in run.unaccounted.items()}}


class RunSettingsSerializer(serializers.Serializer):
    budget_usd = serializers.DecimalField(max_digits=18, decimal_places=6, min_value=0, max_value=10**12 - 1,
                                          required=False, allow_null=True)
    budget_tokens = serializers.IntegerField(min_value=0, max_value=2**63 - 1, required=False, allow_null=True)
    requested_profile = serializers.CharField(max_length=200, required=False, allow_blank=True)
    actual_profile = serializers.CharField(max_length=200, required=False, allow_blank=True)
    git_branch = serializers.CharField(max_length=200, required=False, allow_blank=True)
    git_commit = serializers.CharField(max_length=64, required=False, allow_blank=True)


class IngestResultSerializer(serializers.Serializer):
    run = serializers.CharField()
    accepted = serializers.IntegerField()
    duplicates = serializers.IntegerField()


class TurnSerializer(serializers.ModelSerializer):
    class Meta:
        model = AgentTurn
        fields = ["event_id", "turn", "actor", "parent_actor", "kind", "model", "tokens_in", "tokens_out",
                  "cost_usd", "tool_calls", "duration_ms", "ts"]


class ArtifactSerializer(serializers.ModelSerializer):
    sha256 = serializers.CharField(source="blob.sha256")
    size = serializers.IntegerField(source="blob.size")
    download_url = serializers.SerializerMethodField()

    class Meta:
        model = Artifact
        fields = ["id", "path", "kind", "sha256", "size", "content_type", "commit", "created", "download_url"]

    def get_download_url(self, artifact: Artifact) -> str:
        request = self.context.get("request")
        path = reverse("api:artifact-download", args=[artifact.run.project.slug, artifact.run.external_id, artifact.pk])
        return request.build_absolute_uri(path) if request else path


class ArtifactUploadSerializer(serializers.Serializer):
    file = serializers.FileField()
    path = serializers.CharField(max_length=500, required=False)
    kind = serializers.ChoiceField(choices=ArtifactKind.choices, default=ArtifactKind.FILE)
    sha256 = serializers.RegexField(r"^[0-9a-fA-F]{64}$", required=False,
                                    error_messages={"invalid": "Expected 64 hexadecimal characters."})
    commit = serializers.CharField(max_length=64, required=False, default="")


class ArtifactUploadResultSerializer(ArtifactSerializer):
    created_now = serializers.BooleanField()

    class Meta(ArtifactSerializer.Meta):
        fields = [*ArtifactSerializer.Meta.fields, "created_now"]


class ExclusionSerializer(serializers.Serializer):
    scope = serializers.ChoiceField(choices=["submission", "run"])
    reason = serializers.CharField()
    at = serializers.DateTimeField()


class SubmissionSerializer(serializers.ModelSerializer):
    run = serializers.CharField(source="run.external_id")
    artifact_sha256 = serializers.CharField(source="artifact.blob.sha256", allow_null=True, default=None)
    experiment = serializers.CharField(source="experiment.external_id", allow_null=True, default=None)
    counts = serializers.SerializerMethodField(
        help_text="In the project's numbers (best, leaderboard, charts, carry-forward) once verified: false for "
                  "invalid, rejected and excluded submissions (or of an excluded run).")
    excluded = serializers.SerializerMethodField(help_text="Why an admin took it (or its run) out of the project's "
                                                           "numbers; null when it was not.")

    class Meta:
        model = Submission
        fields = ["id", "run", "harness_id", "score", "status", "counts", "excluded", "artifact_ref",
                  "artifact_sha256", "experiment", "commit", "arena_ref", "details", "ts"]

    def get_counts(self, sub: Submission) -> bool:
        return sub.counts and sub.run.excluded_at is None

    def get_excluded(self, sub: Submission) -> ExclusionSerializer(allow_null=True):  # type: ignore[valid-type]
        if sub.excluded_at:
            return {"scope": "submission", "reason": sub.excluded_reason, "at": sub.excluded_at}
        if sub.run.excluded_at:
            return {"scope": "run", "reason": sub.run.excluded_reason, "at": sub.run.excluded_at}
        return None


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

