"""Alerts: a project's rules (a trigger and one channel), the notifications they raise (one per rule,
subject and episode) and the mentions in comments (one per comment and person), snoozed runs, and the
loops found in a run's tool calls."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import Q

from smrweb.tracking.models.annotation import Comment
from smrweb.tracking.models.common import USD
from smrweb.tracking.models.project import Project
from smrweb.tracking.models.run import Run
from smrweb.tracking.models.submission import Submission


class Trigger(models.TextChoices):
    RUN_FAILED = "run.failed", "run failed"
    RUN_STALLED = "run.stalled", "run stalled"
    RUN_DOWNGRADED = "run.downgraded", "run downgraded (actual model differs from the requested one)"
    RUN_BUDGET = "run.budget", "run reached a fraction of its budget"
    RUN_REGRESSED = "run.regressed", "run regressed (the project's regression threshold)"
    SCORE_NEW_BEST = "score.new_best", "project best improved"
    RUN_NO_PROGRESS = "run.no_progress", "run made no progress"
    RUN_LOOP = "run.loop", "run is looping on a tool call"
    RUN_ERRORS = "run.errors", "run's calls keep failing (an error streak)"
    SUBMISSION_NEEDS_REVIEW = "submission.needs_review", "submission verified, waiting for review"
    SUBMISSION_APPROVED = "submission.approved", "submission approved, ready to upload"
    ARENA_RESULT = "arena.result", "arena result recorded"
    SOURCE_FAILING = "source.failing", "source sync failing"


class Channel(models.TextChoices):
    EMAIL = "email"
    SLACK = "slack"
    WEBHOOK = "webhook"
    INBOX = "inbox"


class Delivery(models.TextChoices):
    IMMEDIATE = "immediate", "at once"
    DIGEST = "digest", "in a digest"


class AlertRule(models.Model):
    """When `trigger` happens in `project`, tell `channel`. What `threshold` and `window` mean depends
    on the trigger (services/alerts/triggers.py TRIGGER_PARAMETERS says, with the defaults). An email rule may
    collect its notifications into one digest every `digest_minutes` instead of one email each."""

    project = models.ForeignKey(Project, models.CASCADE, related_name="alert_rules")
    trigger = models.CharField(max_length=40, choices=Trigger)
    threshold = models.FloatField(null=True, blank=True)
    window = models.PositiveIntegerField(null=True, blank=True)
    channel = models.CharField(max_length=10, choices=Channel)
    target = models.CharField(max_length=1000, blank=True)  # an email address or a URL
    recipient = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.CASCADE, null=True, blank=True, related_name="alert_rules"
    )  # the inbox channel's person
    secret = models.CharField(max_length=64, blank=True)  # signs the webhook channel's requests
    muted = models.BooleanField(default=False)
    delivery = models.CharField(max_length=10, choices=Delivery, default=Delivery.IMMEDIATE)
    digest_minutes = models.PositiveIntegerField(null=True, blank=True)  # the digest's window
    include_candidates = models.BooleanField(default=False)  # score.new_best: unverified scores too
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["trigger", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(channel="inbox", recipient__isnull=False) | (~Q(channel="inbox") & ~Q(target="")),
                name="alertrule_has_destination",
            )
        ]

    def __str__(self) -> str:
        return f"{self.trigger} → {self.destination}"

    @property
    def destination(self) -> str:
        if self.channel == Channel.INBOX:
            return f"inbox of {self.recipient.get_username()}" if self.recipient_id else "inbox"
        return f"{self.channel} {self.target}"


class NotificationStatus(models.TextChoices):
    PENDING = "pending"  # waiting for its first delivery attempt
    SENDING = "sending"  # an attempt is under way
    RETRYING = "retrying"  # an attempt failed; another comes at next_attempt_at
    SENT = "sent"
    FAILED = "failed"  # gave up: the error says why
    SUPPRESSED = (
        "suppressed"  # recorded, never sent: the rule is muted, the run snoozed, or it predates the rule
    )
    HELD = "held"  # waits for its rule's next digest email


class NotificationKind(models.TextChoices):
    ALERT = "alert"  # a rule's episode
    MENTION = "mention"  # someone @mentioned the recipient in a comment
    GUARD = "guard"  # a project guard (spend guard, day budget) paused or stopped runs: told to its deciders


class Notification(models.Model):
    """One episode of one rule's condition on one subject: the unique key is what makes a replayed batch
    or a redelivered task notify once, while a run that recovers and stalls again is a new episode.
    A mention is a notification too (no rule; its comment), so it lands in the same inbox and bell:
    one per comment and person, so editing a comment never notifies anyone twice."""

    kind = models.CharField(max_length=10, choices=NotificationKind, default=NotificationKind.ALERT)
    rule = models.ForeignKey(AlertRule, models.CASCADE, null=True, blank=True, related_name="notifications")
    comment = models.ForeignKey(Comment, models.CASCADE, null=True, blank=True, related_name="notifications")
    subject = models.CharField(max_length=100)  # "run:12", "submission:7", "project:3", "test:<uuid>"
    episode = models.CharField(max_length=200)
    run = models.ForeignKey(Run, models.CASCADE, null=True, blank=True, related_name="+")
    # The project it is about (its rule's, its comment's; a guard's notification has neither rule nor
    # comment, and is told to the project's reviewers and admins).
    project = models.ForeignKey(Project, models.CASCADE, null=True, blank=True, related_name="+")
    submission = models.ForeignKey(Submission, models.CASCADE, null=True, blank=True, related_name="+")
    recipient = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.CASCADE, null=True, blank=True, related_name="notifications"
    )  # set for the inbox channel
    title = models.CharField(max_length=300)
    body = models.TextField()
    url = models.CharField(max_length=1000)
    status = models.CharField(max_length=12, choices=NotificationStatus, default=NotificationStatus.PENDING)
    in_digest = models.BooleanField(default=False)  # delivered in its rule's digest, never on its own
    suppressed_because = models.CharField(max_length=100, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    read_at = models.DateTimeField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["rule", "subject", "episode"], name="notification_episode_uniq"),
            models.UniqueConstraint(fields=["comment", "recipient"], name="notification_mention_uniq"),
            models.UniqueConstraint(
                fields=["project", "subject", "episode", "recipient"],
                condition=Q(kind="guard"),
                name="notification_guard_uniq",
            ),
            models.CheckConstraint(
                condition=Q(kind="alert", rule__isnull=False, comment__isnull=True)
                | Q(kind="mention", rule__isnull=True, comment__isnull=False, recipient__isnull=False)
                | Q(
                    kind="guard",
                    rule__isnull=True,
                    comment__isnull=True,
                    project__isnull=False,
                    recipient__isnull=False,
                ),
                name="notification_alert_or_mention",
            ),
        ]
        indexes = [
            models.Index(fields=["recipient", "read_at"], name="notification_inbox_idx"),
            models.Index(fields=["rule", "-created"], name="notification_rule_created_idx"),
            models.Index(fields=["status", "next_attempt_at"], name="notification_due_idx"),
        ]

    def __str__(self) -> str:
        return self.title

    @property
    def about(self) -> Project | None:
        """The project it is about: its rule's, its comment's, or (a guard's) its own."""
        if self.rule_id:
            return self.rule.project
        if self.comment_id:
            return self.comment.project
        return self.project


class RunSnooze(models.Model):
    """No notification about this run until `until` (episodes that start meanwhile are recorded as
    suppressed, so they do not arrive late either)."""

    run = models.OneToOneField(Run, models.CASCADE, related_name="snooze")
    until = models.DateTimeField()
    by = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+")
    created = models.DateTimeField(auto_now_add=True)


class LoopPattern(models.TextChoices):
    REPEAT = "repeat", "the same call again and again"
    PING_PONG = "ping-pong", "two calls taking turns"


class LoopFinding(models.Model):
    """A stretch of one actor's turns where the agent repeats itself: the same tool call with the same
    arguments k times in a row, or two calls A-B-A-B. Found by the alert evaluator from stored turns;
    the run page shows it as a badge with what the repeats cost."""

    run = models.ForeignKey(Run, models.CASCADE, related_name="loop_findings")
    actor = models.CharField(max_length=200)
    pattern = models.CharField(max_length=10, choices=LoopPattern)
    call = models.CharField(max_length=500)  # how the repeated call (or "A ⇄ B") is shown
    first_turn = models.PositiveIntegerField()
    last_turn = models.PositiveIntegerField()
    repeats = models.PositiveIntegerField()  # calls in the stretch (a ping-pong of 3 cycles: 6)
    wasted_tokens = models.PositiveBigIntegerField(default=0)  # the turns after the first cycle
    wasted_usd = models.DecimalField(default=Decimal(0), **USD)
    detected_at = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-last_turn", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "actor", "first_turn"], name="loopfinding_start_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.call} ×{self.repeats}"
