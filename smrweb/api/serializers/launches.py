"""Launches ("start the next run"): the request, and the launch it made (or the one its key names)."""

from __future__ import annotations

from rest_framework import serializers

from smrweb.tracking.models import RunLaunch
from smrweb.tracking.queries.knowledge import N_MAX, N_MIN
from smrweb.tracking.services import launches


class LaunchSerializer(serializers.ModelSerializer):
    project = serializers.CharField(source="project.slug")
    from_run = serializers.CharField(source="from_run.external_id", allow_null=True, default=None)
    run = serializers.CharField(
        source="run.external_id",
        allow_null=True,
        default=None,
        help_text="The run the launch became, once the source reported it (status `confirmed`).",
    )
    external_run_id = serializers.CharField(
        help_text="The new run's id at the source: chosen by smrweb for push projects (sent in the start "
        "webhook), SMR's answer for SMR projects, `git:<branch>` for git projects; empty until known."
    )
    requested_by = serializers.CharField(source="requested_by.get_username")

    class Meta:
        model = RunLaunch
        fields = [
            "id",
            "project",
            "from_run",
            "run",
            "external_run_id",
            "status",
            "detail",
            "kickoff",
            "model_profile",
            "budget_usd",
            "budget_tokens",
            "git_commit",
            "idempotency_key",
            "attempts",
            "requested_by",
            "created",
            "dispatched_at",
            "finished_at",
        ]


class LaunchIn(serializers.Serializer):
    """Omitted fields take the prefill of the "Start the next run" form: the model profile, budget and
    commit of `from_run` (else of the project's latest run), and a kickoff of the carry-forward block
    followed by `text`."""

    from_run = serializers.CharField(
        required=False, allow_blank=True, max_length=200, help_text="The run this one comes from (its id)."
    )
    kickoff = serializers.CharField(
        required=False,
        max_length=launches.KICKOFF_MAX,
        help_text="The whole kickoff message, as sent. Without it: the carry-forward block (unless "
        "`carry_forward` is false) followed by `text`.",
    )
    text = serializers.CharField(
        required=False, allow_blank=True, max_length=launches.KICKOFF_MAX, help_text="Your own words."
    )
    carry_forward = serializers.BooleanField(required=False, default=True)
    n = serializers.IntegerField(
        required=False, min_value=N_MIN, max_value=N_MAX, default=3, help_text="Failed approaches carried."
    )
    model_profile = serializers.CharField(required=False, allow_blank=True, max_length=200)
    budget_usd = serializers.DecimalField(
        required=False,
        allow_null=True,
        max_digits=18,
        decimal_places=6,
        help_text=f"Positive, at most {launches.BUDGET_USD_MAX}; null for none.",
    )
    budget_tokens = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=launches.BUDGET_TOKENS_MAX
    )
    git_commit = serializers.CharField(
        required=False, allow_blank=True, max_length=64, help_text="Git projects: where the branch starts."
    )
