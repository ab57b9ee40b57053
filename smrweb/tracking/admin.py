"""Django admin for every tracking model. Token secrets are never shown: only their hint.

Rows that the ingest write path derives from events (turns, metrics, scores, state changes, messages,
checkpoints) and the run summaries computed from them are read-only here: editing them by hand would
break the invariants the services keep (spend == sum of turns, state == latest state change).
Deleting them is allowed and recomputes the summaries.
"""

from django.contrib import admin
from django.db import transaction

from smrweb.tracking import models as m
from smrweb.tracking import services
from smrweb.tracking.services import RUN_SETTINGS
from smrweb.tracking.services.figures import rebuild_project_figures, refresh_project_figures


class ReadOnlyAdmin(admin.ModelAdmin):
    """Shown, never added or edited here: rows the services write (with their checks and audit) or derive.
    `deletable` rows may be deleted (windows onto data that is recomputed or queued again); the others
    are history (lifecycle moves, rollbacks, the audit trail) or are changed where they are audited
    (alerts on the Alerts tab, tags, notes and comments on the pages and the API)."""

    deletable = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return self.deletable and super().has_delete_permission(request, obj)


class EventRowAdmin(ReadOnlyAdmin):
    """Browse and delete only. Deleting goes through the service, which recomputes the runs' summaries."""

    deletable = True

    def delete_model(self, request, obj):
        services.delete_event_rows(type(obj).objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset):
        services.delete_event_rows(queryset)


@admin.register(m.Scenario)
class ScenarioAdmin(admin.ModelAdmin):
    list_display = ["key", "name", "shared", "score_metric", "direction", "arena_name"]
    list_filter = ["shared"]
    search_fields = ["key", "name", "harness_id"]


@admin.register(m.ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin):
    """Prices over the built-in table and SMRWEB_MODEL_PRICES; new turns are priced with them at once,
    turns already stored unpriced with `manage.py reprice_turns`."""

    list_display = [
        "model",
        "since",
        "input",
        "output",
        "cached_input",
        "cache_write",
        "reasoning",
        "aliases",
    ]
    search_fields = ["model", "aliases"]
    readonly_fields = ["updated"]


class MembershipInline(admin.TabularInline):
    model = m.Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(m.Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "scenario", "source", "stall_after", "created"]
    list_filter = ["source", "scenario"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline]
    exclude = ["source_settings"]  # holds the sealed SMR key; set it with `create_project`, never shown


@admin.register(m.Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["project", "user", "role", "created"]
    list_filter = ["role", "project"]


@admin.register(m.ProjectInvitation)
class ProjectInvitationAdmin(ReadOnlyAdmin):
    """Read only: invitations are made, resent and revoked on a project's Members tab (audited there)."""

    list_display = ["email", "project", "role", "state", "renewed_at", "sent_at", "accepted_by"]
    list_filter = ["role", "project"]
    search_fields = ["email"]
    exclude = ["nonce"]  # part of the link's signature
    deletable = True


@admin.register(m.Run)
class RunAdmin(admin.ModelAdmin):
    list_display = [
        "external_id",
        "project",
        "state",
        "stalled_since",
        "best_score",
        "turn_count",
        "cost_usd",
        "last_progress_at",
    ]
    list_filter = ["state", "project"]
    search_fields = ["external_id"]
    # Only the settings a person may set are editable; everything else is derived from events.
    fields = [
        "project",
        "external_id",
        "budget_usd",
        "budget_tokens",
        "requested_profile",
        "actual_profile",
        "git_branch",
        "git_commit",
        "state",
        "failure_family",
        "failure_detail",
        "failure_source",
        "stalled_since",
        *m.Run.SPEND_FIELDS,
        "turn_count",
        "best_score",
        "latest_score",
        "score_count",
        "started_at",
        "finished_at",
        "last_progress_at",
        "log_lines",
        "log_lines_dropped",
        "log_warnings",
    ]
    readonly_fields = [f for f in fields if f not in RUN_SETTINGS]

    def has_add_permission(self, request):
        return False  # runs appear with their first event

    # The overview's figures follow a budget edited or a run deleted here (services/figures.py).
    def save_model(self, request, obj, form, change):
        with transaction.atomic():
            super().save_model(request, obj, form, change)
            refresh_project_figures(obj.project, best=False)

    def delete_model(self, request, obj):
        self.delete_queryset(request, m.Run.objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset):
        with transaction.atomic():
            projects = set(queryset.values_list("project_id", flat=True))
            super().delete_queryset(request, queryset)
            for project_id in sorted(projects):
                rebuild_project_figures(project_id)


@admin.register(m.SourceHealth)
class SourceHealthAdmin(admin.ModelAdmin):
    list_display = [
        "project",
        "last_success_at",
        "consecutive_failures",
        "last_error_kind",
        "next_attempt_at",
        "active_runs",
    ]
    readonly_fields = [
        "last_attempt_at",
        "last_success_at",
        "last_error_at",
        "last_error",
        "last_error_kind",
        "consecutive_failures",
        "lease_until",
        "lease_owner",
        "active_runs",
    ]


@admin.register(m.StateChange)
class StateChangeAdmin(EventRowAdmin):
    list_display = ["run", "state", "failure_family", "ts"]
    list_filter = ["state"]
    raw_id_fields = ["run"]


@admin.register(m.Experiment)
class ExperimentAdmin(EventRowAdmin):
    list_display = ["external_id", "run", "title", "status", "verdict"]
    raw_id_fields = ["run", "parent"]


@admin.register(m.MetricPoint)
class MetricPointAdmin(EventRowAdmin):
    list_display = ["run", "key", "step", "value", "ts"]
    raw_id_fields = ["run"]
    show_full_result_count = False  # the table is large: skip the COUNT(*)


@admin.register(m.AgentTurn)
class AgentTurnAdmin(EventRowAdmin):
    list_display = ["run", "actor", "turn", "kind", "model", "tokens_in", "tokens_out", "cost_usd", "ts"]
    list_filter = ["kind"]
    raw_id_fields = ["run"]
    show_full_result_count = False


@admin.register(m.TurnBody)
class TurnBodyAdmin(ReadOnlyAdmin):
    """A turn's prompt and response (stored only when the project captures them): read-only, since they are
    what the source sent; deleting one is allowed (the settings page deletes a project's, audited)."""

    list_display = ["turn", "run", "prompt_bytes", "response_bytes", "prompt_cut", "response_cut"]
    raw_id_fields = ["turn", "run"]
    show_full_result_count = False

    deletable = True


@admin.register(m.BlobSummary)
class BlobSummaryAdmin(ReadOnlyAdmin):
    """A window: what a worker read from a blob (sources/summaries.py). Deleting one is harmless: the next
    page that shows the blob queues it again."""

    list_display = ["blob", "other", "kind", "version", "status", "claimed", "finished", "attempts"]
    list_filter = ["kind", "status"]
    raw_id_fields = ["blob", "other"]

    deletable = True


@admin.register(m.TurnRollup)
class TurnRollupAdmin(ReadOnlyAdmin):
    """A window: derived from the turns by the write path. Deleting one (or its run) is harmless: a page
    computes the aggregates from the rows, and the run's next batch of turns writes the rollup again."""

    list_display = ["run", "turn_count", "tokens_in", "tokens_out", "width", "first_ts", "last_ts", "hwm"]
    raw_id_fields = ["run"]

    deletable = True


@admin.register(m.MetricRollup)
class MetricRollupAdmin(ReadOnlyAdmin):
    """A window: the metric series' buckets, derived from the points by the write path. Deleting one (or
    its run) is harmless: a chart whose rollups no longer add up to the series reads its points."""

    list_display = ["run", "key", "width", "bucket", "n", "low", "high", "first_step", "last_step"]
    raw_id_fields = ["run"]
    show_full_result_count = False

    deletable = True


@admin.register(m.ArtifactBlob)
class ArtifactBlobAdmin(EventRowAdmin):
    list_display = ["sha256", "size", "created"]
    search_fields = ["sha256"]

    # A blob belongs to no run: it goes through the blob collector (row and stored bytes, under the row's
    # lock), not the event-row delete. The admin refuses blobs an artifact still holds (PROTECT) first.
    def delete_model(self, request, obj):
        services.collect_blob(obj.pk)

    def delete_queryset(self, request, queryset):
        services.collect_unreferenced_blobs(queryset)


@admin.register(m.Artifact)
class ArtifactAdmin(EventRowAdmin):
    list_display = ["path", "run", "kind", "blob", "created"]
    raw_id_fields = ["run", "blob"]


@admin.register(m.Submission)
class SubmissionAdmin(EventRowAdmin):
    list_display = ["project", "run", "score", "harness_id", "status", "ts"]
    list_filter = ["status", "project"]
    raw_id_fields = ["run", "experiment", "artifact"]


@admin.register(m.Review)
class ReviewAdmin(admin.ModelAdmin):
    list_display = ["submission", "reviewer", "verdict", "created"]
    raw_id_fields = ["submission"]


@admin.register(m.ArenaResult)
class ArenaResultAdmin(admin.ModelAdmin):
    list_display = ["submission", "arena", "rank", "arena_score", "delta", "created"]
    raw_id_fields = ["submission"]


@admin.register(m.Checkpoint)
class CheckpointAdmin(EventRowAdmin):
    list_display = ["external_id", "run", "label", "restorable", "failure_reason", "ts"]
    raw_id_fields = ["run"]


@admin.register(m.RuntimeMessage)
class RuntimeMessageAdmin(EventRowAdmin):
    list_display = ["run", "seq", "topic", "target", "mode", "ts"]
    raw_id_fields = ["run"]


@admin.register(m.SubmissionTransition)
class SubmissionTransitionAdmin(ReadOnlyAdmin):
    list_display = ["created", "submission", "from_status", "to_status", "by_label", "reason"]
    list_filter = ["to_status"]


@admin.register(m.Rollback)
class RollbackAdmin(ReadOnlyAdmin):
    list_display = [
        "run",
        "target_submission",
        "target_checkpoint",
        "status",
        "attempts",
        "requested_by",
        "created",
    ]
    list_filter = ["status"]


@admin.register(m.RunLaunch)
class RunLaunchAdmin(ReadOnlyAdmin):
    """Start the next run: requests and what their sources answered (written by services.launches)."""

    list_display = ["project", "from_run", "run", "status", "attempts", "requested_by", "created"]
    list_filter = ["status"]


@admin.register(m.RunControl)
class RunControlAdmin(ReadOnlyAdmin):
    list_display = ["run", "kind", "status", "attempts", "requested_by", "guard", "created"]
    list_filter = ["kind", "status"]


@admin.register(m.KnowledgeEntry)
class KnowledgeEntryAdmin(admin.ModelAdmin):
    list_display = ["title", "project", "kind", "created"]
    list_filter = ["kind", "project"]


@admin.register(m.ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "project", "hint", "created", "last_used_at", "revoked_at"]
    fields = ["project", "name", "hint", "created_by", "created", "last_used_at", "revoked_at"]
    readonly_fields = ["hint", "created", "last_used_at", "created_by"]

    def get_readonly_fields(self, request, obj=None):
        # Moving a live secret to another project would silently widen what it can reach.
        return [*self.readonly_fields, "project", "name"] if obj else self.readonly_fields

    def has_add_permission(self, request):
        return False  # tokens are created by the service (UI or command), which shows the secret once


@admin.register(m.AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["created", "actor_label", "verb", "object_type", "object_id", "project"]
    list_filter = ["verb"]


# Alerts are changed on the project's Alerts tab, the API or `create_alert_rule`, which audit what they do;
# the admin only shows them.
@admin.register(m.AlertRule)
class AlertRuleAdmin(ReadOnlyAdmin):
    list_display = ["project", "trigger", "channel", "target", "recipient", "muted", "created"]
    list_filter = ["trigger", "channel", "muted"]
    exclude = ["secret"]  # signs the rule's webhooks: shown to the project's admins on the Alerts tab only


@admin.register(m.Notification)
class NotificationAdmin(ReadOnlyAdmin):
    list_display = ["title", "kind", "rule", "status", "attempts", "created", "sent_at", "read_at"]
    list_filter = ["kind", "status"]
    search_fields = ["title", "subject", "episode"]


@admin.register(m.RunSnooze)
class RunSnoozeAdmin(ReadOnlyAdmin):
    list_display = ["run", "until", "by", "created"]


@admin.register(m.LoopFinding)
class LoopFindingAdmin(ReadOnlyAdmin):
    list_display = ["run", "actor", "pattern", "call", "first_turn", "last_turn", "repeats", "wasted_usd"]
    list_filter = ["pattern"]


@admin.register(m.GuardEpisode)
class GuardEpisodeAdmin(ReadOnlyAdmin):
    """When a spend guard acted on a run (once per episode); written by the guard only."""

    list_display = ["run", "guard", "episode", "action", "created"]
    list_filter = ["guard", "action"]


# Tags, notes and comments are written on the run and submission pages or through the API, which check
# roles, notify mentions and audit; the admin only shows them.
@admin.register(m.RunTag)
class RunTagAdmin(ReadOnlyAdmin):
    list_display = ["run", "key", "value", "updated"]
    search_fields = ["key", "value"]


@admin.register(m.RunParam)
class RunParamAdmin(ReadOnlyAdmin):  # logged by the harness (MLflow's params), immutable: shown only
    list_display = ["run", "key", "value", "created"]
    search_fields = ["key", "value"]


# A run's log: written by the push API and the SMR poller only (services/logs.py keeps each run's seq and
# counts), shown here; deleted with its run.
@admin.register(m.RunLogLine)
class RunLogLineAdmin(ReadOnlyAdmin):
    list_display = ["run", "seq", "level", "source", "stream", "ts", "text"]
    list_filter = ["level", "source"]
    raw_id_fields = ["run"]


@admin.register(m.RunLogBatch)
class RunLogBatchAdmin(ReadOnlyAdmin):
    list_display = ["run", "batch_id", "source", "kept", "dropped", "first_seq", "last_seq", "created"]
    list_filter = ["source"]
    search_fields = ["batch_id"]
    raw_id_fields = ["run"]


@admin.register(m.RunNote)
class RunNoteAdmin(ReadOnlyAdmin):
    list_display = ["run", "edited_by", "updated"]


@admin.register(m.Comment)
class CommentAdmin(ReadOnlyAdmin):
    list_display = ["pk", "project", "run", "submission", "author", "created", "edited_at", "deleted_at"]
    list_filter = ["project"]


@admin.register(m.SavedView)
class SavedViewAdmin(ReadOnlyAdmin):
    """People's views of a project's runs table (saved and deleted on the project page or the API)."""

    list_display = ["pk", "project", "name", "owner", "shared", "updated"]
    list_filter = ["project", "shared"]


@admin.register(m.ShareLink)
class ShareLinkAdmin(ReadOnlyAdmin):
    """Read-only share links (issue 39): created and revoked on the pages (audited there)."""

    list_display = [
        "pk",
        "kind",
        "project",
        "scenario",
        "created_by",
        "created",
        "expires_at",
        "revoked_at",
        "view_count",
    ]
    list_filter = ["kind", "project"]
    exclude = ["token_hash"]


@admin.register(m.ProjectFigures)
class ProjectFiguresAdmin(ReadOnlyAdmin):
    """Derived: the overview's figures, kept by the write path (services/figures.py); a deleted row is
    computed again by the next page that shows the project."""

    list_display = ["project", "runs", "active", "stalled", "waiting", "pending", "best_score", "updated"]
    raw_id_fields = ["project"]

    deletable = True


@admin.register(m.RunDaySpend)
class RunDaySpendAdmin(ReadOnlyAdmin):
    """Derived: what a run's turns cost per UTC day (the overview's spend today), added at ingest."""

    list_display = ["run", "day", "cost_usd", "turns"]
    raw_id_fields = ["run", "project"]

    deletable = True  # with its run


@admin.register(m.RunModelSpend)
class RunModelSpendAdmin(ReadOnlyAdmin):
    """Derived: what a run's turns of one model cost per quarter hour (spend by model and by day), added at
    ingest."""

    list_display = ["run", "model", "slot", "cost_usd", "turns", "unpriced"]
    raw_id_fields = ["run", "project"]

    deletable = True  # with its run
