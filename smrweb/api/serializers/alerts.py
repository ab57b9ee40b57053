"""Alert rules: the rule as answered, what creating one and muting one take, and the delivery log.

The serializers only parse; what a trigger, a channel and a destination accept is the domain's
(`services/alerts/rules.py`), which answers InvalidInput naming the field."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from rest_framework import serializers

from smrweb.tracking.models import AlertRule, Channel, Delivery, Notification, Trigger

URL_CHANNELS = (Channel.SLACK, Channel.WEBHOOK)


def shown_target(rule: AlertRule, *, admin: bool) -> str:
    """The rule's target as this reader may see it: a Slack or webhook URL often carries its own
    credential (Slack's incoming-webhook path is one), so only admins see more than its origin."""
    if admin or rule.channel not in URL_CHANNELS or not rule.target:
        return rule.target
    try:
        parts = urlsplit(rule.target)
        origin = f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    except ValueError:
        return "…"
    return f"{origin}/…"


class NumberField(serializers.FloatField):
    """A float that is not a boolean (DRF's FloatField reads `true` as 1.0)."""

    def to_internal_value(self, data):
        if isinstance(data, bool):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictSerializer(serializers.Serializer):
    """Refuses fields it does not know (a misspelt `treshold` would otherwise be dropped silently and the
    rule made with the default)."""

    unknown_message = "Unknown field."

    def to_internal_value(self, data):
        if isinstance(data, Mapping):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: [self.unknown_message] for name in unknown})
        return super().to_internal_value(data)


class AlertRuleIn(StrictSerializer):
    """A new rule: when `trigger` happens in the project, tell `channel` (unknown fields are refused)."""

    trigger = serializers.ChoiceField(choices=Trigger.choices)
    channel = serializers.ChoiceField(choices=Channel.choices)
    target = serializers.CharField(
        max_length=1000,
        required=False,
        allow_blank=True,
        default="",
        trim_whitespace=True,
        help_text="email: the address; slack and webhook: the http(s) URL to POST to (a public address "
        "unless the operator allows private ones). Not for inbox.",
    )
    recipient = serializers.CharField(
        max_length=150,
        required=False,
        allow_blank=True,
        allow_null=True,
        default=None,
        help_text="inbox only: the user name of a member of the project.",
    )
    threshold = NumberField(
        required=False,
        allow_null=True,
        default=None,
        help_text="run.budget: the fraction of the budget (0.01–1, default 0.8; notifies again at 1); "
        "run.regressed: how much worse than the run's best (default: the project's threshold); "
        "run.no_progress: USD spent without a better score. Other triggers take none.",
    )
    window = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        help_text="run.no_progress: turns without a better score (default 50); run.loop: repeats in a row "
        "(default 3); source.failing: consecutive failed syncs (default 3). Other triggers take none.",
    )

    delivery = serializers.ChoiceField(
        choices=Delivery.choices,
        required=False,
        allow_null=True,
        default=None,
        help_text="email only: `digest` collects the rule's notifications into one email every "
        "`digest_minutes`; `immediate` sends each. Default: a digest for submission.needs_review, "
        "score.new_best and run.regressed, immediate for the rest. Other channels are immediate (the inbox "
        "groups by itself).",
    )
    digest_minutes = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        help_text="A digest's window in minutes (5–1440, default 30); giving one asks for a digest.",
    )
    include_candidates = serializers.BooleanField(
        required=False,
        default=False,
        help_text="score.new_best only: announce unverified (candidate) scores too. Off by default: the "
        "project's best counts verified submissions only.",
    )


class AlertRuleUpdate(StrictSerializer):
    """Mute or unmute: the only change a rule takes."""

    unknown_message = "Only `muted` can be changed: delete the rule and create another to change the rest."

    muted = serializers.BooleanField()


class AlertRuleSerializer(serializers.ModelSerializer):
    """An alert rule: its trigger (with `threshold` and `window` as given; null means the trigger's
    default) and its one destination."""

    # Context: `admin` (the reader is an admin: URL targets in full) and `secret` (show the webhook's
    # signing secret: on create, and to admins reading the one rule).

    trigger_label = serializers.CharField(source="get_trigger_display", read_only=True)
    target = serializers.SerializerMethodField(
        help_text="For slack and webhook rules, readers who are not admins see the URL's origin only."
    )
    recipient = serializers.CharField(source="recipient.get_username", allow_null=True, default=None)
    destination = serializers.SerializerMethodField()
    created_by = serializers.CharField(source="created_by.get_username", allow_null=True, default=None)
    secret = serializers.SerializerMethodField(
        help_text="webhook rules: the HMAC-SHA256 key the receiver checks `X-Smrweb-Signature` with. Shown "
        "when the rule is created and to admins reading the one rule; null everywhere else."
    )

    class Meta:
        model = AlertRule
        fields = [
            "id",
            "trigger",
            "trigger_label",
            "channel",
            "target",
            "recipient",
            "destination",
            "threshold",
            "window",
            "delivery",
            "digest_minutes",
            "include_candidates",
            "muted",
            "created_by",
            "created",
            "updated",
            "secret",
        ]

    def _admin(self) -> bool:
        return bool(self.context.get("admin"))

    def get_target(self, rule: AlertRule) -> str:
        return shown_target(rule, admin=self._admin())

    def get_destination(self, rule: AlertRule) -> str:
        if rule.channel == Channel.INBOX:
            return rule.destination
        return f"{rule.channel} {shown_target(rule, admin=self._admin())}"

    def get_secret(self, rule: AlertRule) -> str | None:
        if self.context.get("secret") and rule.channel == Channel.WEBHOOK:
            return rule.secret
        return None


class DeliverySerializer(serializers.ModelSerializer):
    """One notification of a rule: what it said, and what became of its delivery."""

    class Meta:
        model = Notification
        fields = [
            "id",
            "subject",
            "episode",
            "title",
            "status",
            "suppressed_because",
            "attempts",
            "last_error",
            "next_attempt_at",
            "sent_at",
            "created",
        ]


class InboxItemSerializer(serializers.ModelSerializer):
    """One notification of the person's inbox: an alert rule's (with its trigger), a mention, or a spend
    guard's act (`kind` guard: a run paused or stopped, the day budget reached)."""

    trigger = serializers.CharField(source="rule.trigger", allow_null=True, default=None)
    project = serializers.SerializerMethodField()
    read = serializers.SerializerMethodField()

    class Meta:
        model = Notification
        fields = ["id", "kind", "trigger", "project", "title", "body", "url", "read", "read_at", "created"]

    def get_project(self, n: Notification) -> str:
        return n.about.slug

    def get_read(self, n: Notification) -> bool:
        return n.read_at is not None


class InboxReadIn(StrictSerializer):
    """What to mark read: `ids`, or everything matching `kind` / `project` / `unread` (all of the
    inbox when none is given), up to `upto` (the newest id the reader saw)."""

    ids = serializers.ListField(child=serializers.IntegerField(min_value=1), required=False, max_length=1000)
    kind = serializers.CharField(required=False, allow_blank=True, max_length=40)
    project = serializers.CharField(required=False, allow_blank=True, max_length=100)
    unread = serializers.BooleanField(required=False)
    upto = serializers.IntegerField(required=False, min_value=1)
