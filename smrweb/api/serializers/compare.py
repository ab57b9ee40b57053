"""Compare's series over the API: any metric of up to 200 runs against any axis."""

from __future__ import annotations

from rest_framework import serializers

from smrweb.tracking.queries import arms, compare, series

METRIC_MAX = 200  # a metric key's length in the model


class SeriesQuerySerializer(serializers.Serializer):
    """`GET …/compare/series` parameters."""

    runs = serializers.ListField(
        child=serializers.CharField(max_length=400),
        min_length=1,
        help_text="Runs to compare, repeated or comma-separated: `run` of this project or `project:run` of "
        f"another project you can read; at most {series.MAX_RUNS}.",
    )
    metric = serializers.CharField(
        default=series.SCORE, max_length=METRIC_MAX, help_text="`score` or a logged metric key."
    )
    x = serializers.ChoiceField(choices=series.AXES, default="usd", help_text="The x-axis.")
    group = serializers.CharField(
        default="",
        allow_blank=True,
        max_length=260,
        help_text="Group the runs into arms: `project`, `scenario`, `profile`, `kickoff`, `tag:KEY` or "
        "`param:KEY`.",
    )

    def validate_group(self, value: str) -> str:
        try:
            return arms.parse_group(value)
        except arms.GroupError as e:
            raise serializers.ValidationError(str(e)) from None

    def to_internal_value(self, data):
        values = dict(data.items()) if hasattr(data, "items") else dict(data)
        if hasattr(data, "getlist"):
            values["runs"] = compare.parse_run_ids(data.getlist("runs"))
        return super().to_internal_value(values)

    def validate_runs(self, value: list[str]) -> list[str]:
        if len(value) > series.MAX_RUNS:
            raise serializers.ValidationError(
                f"{len(value)} runs named; at most {series.MAX_RUNS} are compared at once."
            )
        return value


class TraceSerializer(serializers.Serializer):
    run = serializers.CharField(source="name", help_text="As named in the request.")
    project = serializers.CharField(source="run.project.slug")
    run_id = serializers.CharField(source="run.external_id")
    points = serializers.ListField(
        child=serializers.ListField(child=serializers.JSONField()),
        help_text="[x, y] in x order, downsampled; x in ISO 8601 on the wall clock, seconds since the "
        "run's start on `time`, else a number. On a spend axis the last point carries the last value to "
        "what the run has spent (`x_total`).",
    )
    best = serializers.ListField(
        child=serializers.ListField(child=serializers.JSONField()),
        help_text="The score's best so far at each change (the run's scenario's direction); [] for metrics.",
    )
    x_total = serializers.FloatField(
        allow_null=True, help_text="The run's own total on a spend axis (turns, tokens, USD); else null."
    )
    carried = serializers.BooleanField(
        help_text="The last point is the last value carried to `x_total` (what the run has spent since)."
    )
    points_read = serializers.IntegerField(source="read", help_text="Of the metric, before downsampling.")


class SpreadSerializer(serializers.Serializer):
    median = serializers.FloatField(allow_null=True)
    min = serializers.FloatField(allow_null=True, source="low")
    max = serializers.FloatField(allow_null=True, source="high")


class ArmSerializer(serializers.Serializer):
    arm = serializers.CharField(source="label")
    n = serializers.IntegerField()
    runs = serializers.ListField(child=serializers.CharField())
    line = serializers.ListField(
        child=serializers.ListField(child=serializers.FloatField()),
        help_text="[x, median, band low, band high, runs at x] at equal x across the arm's runs.",
    )
    band = serializers.ChoiceField(choices=["iqr", "range"], help_text="iqr from four runs, else min–max.")
    best_score = SpreadSerializer(source="best")
    final_score = SpreadSerializer(source="final")
    usd = SpreadSerializer()
    tokens = SpreadSerializer()
    gain_per_usd = serializers.FloatField(
        allow_null=True, help_text="Median of the score gained (best over first) per USD."
    )
    gain_per_mtok = serializers.FloatField(allow_null=True, help_text="The same per million tokens.")
    failed_share = serializers.FloatField(help_text="Runs failed or abandoned, of the arm's runs.")


class DifferenceSerializer(serializers.Serializer):
    arm = serializers.CharField()
    against = serializers.CharField(help_text="The leading arm: the best where every arm has been.")
    x = serializers.FloatField(help_text="Where the two are compared: the lower of their median run ends.")
    ahead = serializers.CharField(help_text="The arm with the better median at `x` (score: its direction).")
    behind = serializers.CharField()
    margin = serializers.FloatField(help_text="How far `ahead`'s median is from `behind`'s at `x`.")
    low = serializers.FloatField(help_text="95 % bootstrap interval of the margin.")
    high = serializers.FloatField()
    fewest = serializers.IntegerField(help_text="Runs with a value at `x` in the smaller of the two arms.")
    p = serializers.FloatField(
        help_text="The rank-sum (Mann-Whitney) test's two-sided p: the share of random splits of the two "
        "arms' runs that rank at least as far apart (every split, for small arms)."
    )
    separable = serializers.BooleanField(
        help_text=f"p < {arms.ALPHA}: False says the data cannot tell the two arms apart."
    )


class SeriesSerializer(serializers.Serializer):
    metric = serializers.CharField()
    x = serializers.CharField()
    x_label = serializers.CharField()
    runs = TraceSerializer(many=True, source="traces")
    missing = serializers.ListField(
        child=serializers.CharField(), help_text="Names that are not runs you can read."
    )
    without_metric = serializers.ListField(
        child=serializers.CharField(), help_text="Runs with no point of the metric."
    )
    group = serializers.CharField()
    arms = ArmSerializer(many=True)
    differences = DifferenceSerializer(many=True)
