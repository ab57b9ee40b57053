"""The audit trail: who did what to which object."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from smrweb.tracking.models.project import Project


class AuditVerb(models.TextChoices):
    """Every verb the audit trail records: the one list that services write (`record_audit` refuses any
    other) and the audit page, its CSV and the demo console read. The label is what the verb says. The
    stored value is the string, so adding a verb needs no migration; renaming one would (old rows)."""

    ACCOUNT_PASSWORD_CHANGED = "account.password_changed", "Account password changed"
    ACCOUNT_PASSWORD_RESET = "account.password_reset", "Account password reset"

    ALERT_RULE_CREATED = "alert_rule.created", "Alert rule created"
    ALERT_RULE_DELETED = "alert_rule.deleted", "Alert rule deleted"
    ALERT_RULE_MUTED = "alert_rule.muted", "Alert rule muted"
    ALERT_RULE_TEST_SENT = "alert_rule.test_sent", "Alert rule tested"
    ALERT_RULE_UNMUTED = "alert_rule.unmuted", "Alert rule unmuted"

    ARENA_RESULT_RECORDED = "arena_result.recorded", "Arena result recorded"

    ARTIFACT_STORED = "artifact.stored", "Artifact stored"

    COMMENT_ADDED = "comment.added", "Comment added"
    COMMENT_DELETED = "comment.deleted", "Comment deleted"
    COMMENT_EDITED = "comment.edited", "Comment edited"

    CONTROL_ACCEPTED = "control.accepted", "Steering accepted"
    CONTROL_CONFIRMED = "control.confirmed", "Steering confirmed by the run"
    CONTROL_DISPATCHED = "control.dispatched", "Steering sent"
    CONTROL_FAILED = "control.failed", "Steering failed"
    CONTROL_REQUESTED = "control.requested", "Steering requested"

    KNOWLEDGE_ADDED = "knowledge.added", "Knowledge added"
    KNOWLEDGE_EDITED = "knowledge.edited", "Knowledge edited"

    LAUNCH_ACCEPTED = "launch.accepted", "Launch accepted"
    LAUNCH_CONFIRMED = "launch.confirmed", "Launch confirmed"
    LAUNCH_DISPATCHED = "launch.dispatched", "Launch dispatched"
    LAUNCH_FAILED = "launch.failed", "Launch failed"
    LAUNCH_REQUESTED = "launch.requested", "Launch requested"
    LAUNCH_UNSEEN = "launch.unseen", "Launch unseen"

    MEMBER_INVITE_RESENT = "member.invite_resent", "Member invite resent"
    MEMBER_INVITE_REVOKED = "member.invite_revoked", "Member invite revoked"
    MEMBER_INVITED = "member.invited", "Member invited"
    MEMBER_JOINED = "member.joined", "Member joined"
    MEMBER_REMOVED = "member.removed", "Member removed"
    MEMBER_SET = "member.set", "Member role set"

    PROJECT_ARCHIVED = "project.archived", "Project archived"
    PROJECT_BRANCH_FOLLOWED = "project.branch_followed", "Project branch followed"
    PROJECT_CREATED = "project.created", "Project created"
    PROJECT_DELETED = "project.deleted", "Project deleted"
    PROJECT_GIT_REPOSITORY_PINNED = "project.git_repository_pinned", "Project git repository pinned"
    PROJECT_IMPORTED = "project.imported", "Project imported"
    PROJECT_METRIC_ADOPTED = "project.metric_adopted", "Project metric adopted"
    PROJECT_RESTORED = "project.restored", "Project restored"
    PROJECT_RETENTION_CHANGED = "project.retention_changed", "Project retention changed"
    PROJECT_SCORE_METRIC_CHOSEN = "project.score_metric_chosen", "Project score metric chosen"
    PROJECT_SETTINGS_CHANGED = "project.settings_changed", "Project settings changed"
    PROJECT_SMR_KEY_REPLACED = "project.smr_key_replaced", "SMR API key replaced"
    PROJECT_SOURCE_CHANGED = "project.source_changed", "Project source changed"
    PROJECT_TURN_BODIES_DELETED = "project.turn_bodies_deleted", "Project turn bodies deleted"
    PROJECT_VERIFICATION_CATCH_UP = "project.verification_catch_up", "Project verification catch up"

    RETENTION_APPLIED = "retention.applied", "Retention applied"

    REVIEW_APPROVAL_RECORDED = "review.approval_recorded", "Review approval recorded"

    ROLLBACK_ACCEPTED = "rollback.accepted", "Rollback accepted"
    ROLLBACK_APPLIED = "rollback.applied", "Rollback applied"
    ROLLBACK_DISPATCHED = "rollback.dispatched", "Rollback dispatched"
    ROLLBACK_FAILED = "rollback.failed", "Rollback failed"
    ROLLBACK_REQUESTED = "rollback.requested", "Rollback requested"

    RUN_ARCHIVED = "run.archived", "Run archived"
    RUN_CLOSED = "run.closed", "Run closed as abandoned"
    RUN_DELETED = "run.deleted", "Run deleted"
    RUN_EXCLUDED = "run.excluded", "Run excluded"
    RUN_GUARD_PAUSED = "run.guard_paused", "Pause asked by a project guard"
    RUN_GUARD_UNABLE = "run.guard_unable", "Project guard could not pause or stop"
    RUN_INCLUDED = "run.included", "Run included"
    RUN_NOTE_CLEARED = "run.note_cleared", "Run note cleared"
    RUN_NOTE_EDITED = "run.note_edited", "Run note edited"
    RUN_PARAMS_LOGGED = "run.params_logged", "Run params logged"
    RUN_PINNED = "run.pinned", "Run pinned"
    RUN_RENAMED = "run.renamed", "Run renamed"
    RUN_RESTORED = "run.restored", "Run restored"
    RUN_SETTINGS_CHANGED = "run.settings_changed", "Run settings changed"
    RUN_SNOOZED = "run.snoozed", "Run snoozed"
    RUN_STALLED = "run.stalled", "Run stalled"
    RUN_STOP_FAILED = "run.stop_failed", "Stop failed"
    RUN_STOP_REQUESTED = "run.stop_requested", "Stop requested"
    RUN_STOPPED = "run.stopped", "Run stopped"
    RUN_TAGGED = "run.tagged", "Run tagged"
    RUN_UNPINNED = "run.unpinned", "Run unpinned"
    RUN_UNSNOOZED = "run.unsnoozed", "Run unsnoozed"
    RUN_UNTAGGED = "run.untagged", "Run untagged"

    SCENARIO_CREATED = "scenario.created", "Scenario created"
    SCENARIO_PRESET_UPDATED = "scenario.preset_updated", "Scenario preset updated"

    SHARE_LINK_CREATED = "share_link.created", "Share link created"
    SHARE_LINK_REVOKED = "share_link.revoked", "Share link revoked"

    SUBMISSION_APPROVED = "submission.approved", "Submission approved"
    SUBMISSION_CANDIDATE = "submission.candidate", "Submission candidate"
    SUBMISSION_EXCLUDED = "submission.excluded", "Submission excluded"
    SUBMISSION_INCLUDED = "submission.included", "Submission included"
    SUBMISSION_INVALID = "submission.invalid", "Submission invalid"
    SUBMISSION_RANKED = "submission.ranked", "Submission ranked"
    SUBMISSION_REFUSED = "submission.refused", "Submission refused by the arena"
    SUBMISSION_REJECTED = "submission.rejected", "Submission rejected"
    SUBMISSION_REVIEW_NOT_COUNTED = "submission.review_not_counted", "Own approval recorded (does not count)"
    SUBMISSION_UPLOADED = "submission.uploaded", "Submission uploaded"
    SUBMISSION_VERIFIED = "submission.verified", "Submission verified"
    SUBMISSION_VERIFYING = "submission.verifying", "Submission sent to verification"

    TOKEN_CREATED = "token.created", "Token created"
    TOKEN_REVOKED = "token.revoked", "Token revoked"

    VIEW_DELETED = "view.deleted", "Shared view deleted"
    VIEW_SAVED = "view.saved", "Shared view saved"

    USER_CREATED = "user.created", "User created"
    USER_SSO_LINKED = "user.sso_linked", "User sso linked"


class AuditEvent(models.Model):
    """Who did what to which object, and when. Written by services, never edited."""

    actor = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True)
    actor_label = models.CharField(max_length=200)  # "alice", "token:ci-harness", "system"
    verb = models.CharField(max_length=100)
    # SET_NULL: a deleted project's trail survives (its slug is in `detail["project_slug"]` of its
    # "project.deleted" row).
    project = models.ForeignKey(Project, models.SET_NULL, null=True, blank=True, related_name="audit_events")
    object_type = models.CharField(max_length=100)
    object_id = models.CharField(max_length=200)
    detail = models.JSONField(default=dict, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [models.Index(fields=["project", "-created"], name="audit_project_created_idx")]

    def __str__(self) -> str:
        return f"{self.actor_label} {self.verb} {self.object_type}:{self.object_id}"
