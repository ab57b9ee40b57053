"""Submissions: the leaderboard row, the lifecycle with its transitions, and the reviewer actions' input
and answers."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field, inline_serializer
from rest_framework import serializers

from smrweb.tracking.models import Submission, SubmissionTransition
from smrweb.tracking.services import handoff, submissions


class ExclusionSerializer(serializers.Serializer):
    scope = serializers.ChoiceField(choices=["submission", "run"])
    reason = serializers.CharField()
    at = serializers.DateTimeField()


class SubmissionSerializer(serializers.ModelSerializer):
    run = serializers.CharField(source="run.external_id")
    artifact_sha256 = serializers.CharField(source="artifact.blob.sha256", allow_null=True, default=None)
    experiment = serializers.CharField(source="experiment.external_id", allow_null=True, default=None)
    counts = serializers.SerializerMethodField(
        help_text="In the project's numbers (best, leaderboard, charts, carry-forward) once verified: false "
        "for "
        "invalid, rejected and excluded submissions (or of an excluded run)."
    )
    excluded = serializers.SerializerMethodField(
        help_text="Why an admin took it (or its run) out of the project's numbers; null when it was not."
    )

    class Meta:
        model = Submission
        fields = [
            "id",
            "run",
            "harness_id",
            "score",
            "status",
            "counts",
            "excluded",
            "artifact_ref",
            "artifact_sha256",
            "experiment",
            "commit",
            "arena_ref",
            "details",
            "ts",
        ]

    def get_counts(self, sub: Submission) -> bool:
        return sub.counts and sub.run.excluded_at is None

    def get_excluded(self, sub: Submission) -> ExclusionSerializer(allow_null=True):  # type: ignore[valid-type]
        if sub.excluded_at:
            return {"scope": "submission", "reason": sub.excluded_reason, "at": sub.excluded_at}
        if sub.run.excluded_at:
            return {"scope": "run", "reason": sub.run.excluded_reason, "at": sub.run.excluded_at}
        return None


class TransitionSerializer(serializers.ModelSerializer):
    class Meta:
        model = SubmissionTransition
        fields = ["from_status", "to_status", "by_label", "reason", "created"]


class ApprovalsSerializer(serializers.Serializer):
    counted = serializers.IntegerField(
        help_text="Distinct people whose approval counts (never the proposer's own where two must approve)."
    )
    needed = serializers.IntegerField(
        help_text="How many must approve: 2 with the project's second-person rule (whatever verified it), "
        "else 1."
    )
    by = serializers.ListField(child=serializers.CharField(), help_text="Who they are, first first.")
    still_needed = serializers.CharField(
        help_text='Who may still approve, in words ("one more approval by someone other than alice"); '
        "empty once enough have."
    )


class AllowanceSerializer(serializers.Serializer):
    limit = serializers.IntegerField(allow_null=True, help_text="The scenario's arena_daily_limit.")
    used = serializers.IntegerField(help_text="Uploads this project marked since the arena's day began.")
    left = serializers.IntegerField(allow_null=True)
    day_start = serializers.DateTimeField()
    resets_at = serializers.DateTimeField(help_text="When the arena's next day starts, in its own zone.")
    timezone = serializers.CharField()


class LifecycleSerializer(serializers.ModelSerializer):
    run = serializers.CharField(source="run.external_id")
    proposed_by = serializers.CharField(source="proposed_by.get_username", allow_null=True, default=None)
    transitions = TransitionSerializer(many=True)
    approvals = serializers.SerializerMethodField()
    arena_uploads = serializers.SerializerMethodField()

    class Meta:
        model = Submission
        fields = [
            "id",
            "run",
            "score",
            "status",
            "verification_outcome",
            "verification_exit_code",
            "verification_output",
            "verified_at",
            "proposed_by",
            "uploaded_at",
            "arena_ref",
            "approvals",
            "arena_uploads",
            "transitions",
        ]

    @extend_schema_field(ApprovalsSerializer)
    def get_approvals(self, sub: Submission) -> dict:
        return submissions.approvals(sub).as_dict()

    @extend_schema_field(AllowanceSerializer)
    def get_arena_uploads(self, sub: Submission) -> dict:
        """The project's arena uploads today against the scenario's daily limit."""
        return handoff.upload_allowance(sub.project).as_dict()


class ReviewIn(serializers.Serializer):
    comment = serializers.CharField(required=False, allow_blank=True, max_length=5000, default="")


REVIEW_OUT = inline_serializer(
    "ReviewOut",
    {
        "counted": serializers.BooleanField(),
        "message": serializers.CharField(),
        "submission": LifecycleSerializer(),
    },
)


class UploadedIn(serializers.Serializer):
    arena_ref = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=500,
        default="",
        help_text="The arena's own id or URL for the upload (https:// or http://).",
    )
    confirm_over_limit = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Record the upload even though the arena's uploads for today are used up (otherwise "
        "409 `arena_daily_limit_reached`).",
    )


class RefusedIn(serializers.Serializer):
    reason = serializers.CharField(
        max_length=5000, help_text="What the arena said (required): carried forward as a failed approach."
    )


class ArenaResultIn(serializers.Serializer):
    rank = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=10_000_000)
    arena_score = serializers.FloatField(required=False, allow_null=True)
    note = serializers.CharField(required=False, allow_blank=True, max_length=5000, default="")
    # A rank or a score, a score in range: the domain's rule (`handoff.record_arena_result`).


ARENA_OUT = inline_serializer(
    "ArenaResultOut",
    {
        "id": serializers.IntegerField(),
        "rank": serializers.IntegerField(allow_null=True),
        "arena_score": serializers.FloatField(allow_null=True),
        "delta": serializers.FloatField(allow_null=True),
        "delta_best": serializers.FloatField(allow_null=True),
        "rank_delta": serializers.IntegerField(
            allow_null=True, help_text="Rank minus the previous rank: negative is up."
        ),
        "better": serializers.BooleanField(
            allow_null=True,
            help_text="Whether the arena score improved on the previous "
            "result in the arena's own direction (null: unknown).",
        ),
        "note": serializers.CharField(),
    },
)


class DiffAgainstSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    chosen_as = serializers.CharField(
        help_text='How it was chosen, e.g. "the previous approved submission at …".'
    )
    status = serializers.CharField()
    score = serializers.FloatField()
    run = serializers.CharField(help_text="The run's external id.")
    path = serializers.CharField()
    sha256 = serializers.CharField()


class DiffPendingSerializer(serializers.Serializer):
    status = serializers.ChoiceField(["pending"])
    message = serializers.CharField()


class DiffBytesSerializer(serializers.Serializer):
    old_sha256 = serializers.CharField(help_text="Of the artifact compared with (`against`).")
    new_sha256 = serializers.CharField(help_text="Of this submission's artifact.")
    old_size = serializers.IntegerField()
    new_size = serializers.IntegerField()


class ReshapedTensorSerializer(serializers.Serializer):
    name = serializers.CharField()
    old = serializers.CharField(help_text='Type and shape, e.g. "float32[224, 32]".')
    new = serializers.CharField()


class ChangedTensorSerializer(serializers.Serializer):
    name = serializers.CharField()
    dtype = serializers.CharField()
    shape = serializers.ListField(child=serializers.IntegerField())
    elements = serializers.IntegerField()
    changed = serializers.IntegerField(help_text="Elements whose values differ.")
    max_abs_change = serializers.FloatField(allow_null=True, help_text="null for string tensors.")
    mean_abs_change = serializers.FloatField(
        allow_null=True, help_text="Over all the tensor's elements (unchanged ones as 0)."
    )


class DiffWeightsSerializer(serializers.Serializer):
    status = serializers.ChoiceField(
        ["done", "too_large", "unreadable"],
        help_text="done: the figures below are complete; too_large: past the comparison's limits (tensors, "
        "elements, memory or time: `reason` says which), only the names, shapes and digests were compared; "
        "unreadable: `reason` says why.",
    )
    reason = serializers.CharField()
    added = serializers.ListField(child=serializers.CharField(), help_text="Tensors only in this model.")
    removed = serializers.ListField(child=serializers.CharField(), help_text="Tensors only in the other.")
    reshaped = ReshapedTensorSerializer(many=True, help_text="Same name, another shape or element type.")
    tensors_compared = serializers.IntegerField(
        help_text="In both models with the same name, type and shape."
    )
    tensors_changed = serializers.IntegerField()
    parameters_compared = serializers.IntegerField(help_text="Elements of the tensors compared.")
    parameters_changed = serializers.IntegerField(help_text="Elements whose values differ (NaN equals NaN).")
    max_abs_change = serializers.FloatField(help_text="The largest finite absolute change of an element.")
    mean_abs_change = serializers.FloatField(
        help_text="The mean absolute change over every element compared (unchanged ones as 0)."
    )
    nonfinite_changes = serializers.IntegerField(help_text="Changes to or from inf or NaN (not in max/mean).")
    tensors = ChangedTensorSerializer(many=True, help_text="The changed tensors with the largest change.")
    more_tensors = serializers.IntegerField(help_text="Changed tensors not listed in `tensors`.")


class DiffSerializer(serializers.Serializer):
    status = serializers.SerializerMethodField(help_text='"done": the diff is here (202 answers "pending").')
    submission = serializers.IntegerField(source="submission.pk")
    against = serializers.SerializerMethodField()
    mode = serializers.ChoiceField(
        ["text", "onnx", "binary"],
        help_text="text: a line diff of the files; onnx: of the models' summaries (and `structural`); "
        "binary: only whether the bytes differ.",
    )
    unified = serializers.CharField(
        source="text.unified", help_text="A unified diff (`---`, `+++`, `@@` hunks, 3 lines of context)."
    )
    added = serializers.IntegerField(source="text.added")
    removed = serializers.IntegerField(source="text.removed")
    identical = serializers.BooleanField(
        help_text="The digests are equal. Only then: different bytes are never identical, whatever else is "
        "equal (the text once decoded, an ONNX model's graph)."
    )
    summary = serializers.CharField(
        source="headline",
        help_text='What changed, in one line: "identical bytes", "bytes differ (sha256 … vs …, sizes …)", '
        '"same structure, weights differ (sha256 … vs …)", "3 lines added, 1 removed", …',
    )
    bytes = serializers.SerializerMethodField()
    same_structure = serializers.BooleanField(
        allow_null=True,
        help_text="ONNX only (else null): the graph summaries and the tensors' names, types and shapes are "
        "equal.",
    )
    weights = DiffWeightsSerializer(
        allow_null=True,
        help_text="ONNX models with different bytes only (else null): their weights compared tensor by "
        "tensor, element by element on a worker.",
    )
    structural = serializers.ListField(
        child=serializers.DictField(),
        help_text='ONNX only: {"field", "old", "new", "change"} for each input, output, opset, '
        "parameter-count and operator-count difference.",
    )
    note = serializers.CharField()

    def get_status(self, diff) -> str:
        return "done"

    @extend_schema_field(DiffBytesSerializer)
    def get_bytes(self, diff) -> dict:
        return {
            "old_sha256": diff.old_blob.sha256,
            "new_sha256": diff.new_blob.sha256,
            "old_size": diff.old_blob.size,
            "new_size": diff.new_blob.size,
        }

    @extend_schema_field(DiffAgainstSerializer)
    def get_against(self, diff) -> dict:
        other = diff.against
        return {
            "id": other.pk,
            "chosen_as": diff.reason,
            "status": other.status,
            "score": other.score,
            "run": other.run.external_id,
            "path": other.artifact.path,
            "sha256": other.artifact.blob.sha256,
        }


class BulkIn(serializers.Serializer):
    action = serializers.ChoiceField(
        choices=list(submissions.BULK_ACTIONS),
        help_text="verify: put candidates (or invalid ones) up for verification; approve: approve verified "
        "ones, by the second-person rule for each.",
    )
    ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1),
        min_length=1,
        max_length=submissions.BULK_MAX,
        help_text=f"Submission ids of this project, at most {submissions.BULK_MAX}; each is acted on once.",
    )
    comment = serializers.CharField(required=False, allow_blank=True, max_length=5000, default="")


class BulkResultSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    outcome = serializers.ChoiceField(
        ["verifying", "approved", "approval_recorded", "skipped"],
        help_text="approval_recorded: the approval counts but the submission waits for a second approver.",
    )
    detail = serializers.CharField()
    why = serializers.CharField(
        help_text="For skipped ones: proposed | approved_already | status | missing | refused; else empty."
    )


BULK_OUT = inline_serializer(
    "BulkOut",
    {
        "action": serializers.CharField(),
        "summary": serializers.CharField(help_text='e.g. "10 approved, 2 skipped: you proposed them"'),
        "results": BulkResultSerializer(many=True),
    },
)
