"""A project's alert rules (admins only): list with their delivery logs, create, mute, delete, send a test."""

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from smrweb import tasks
from smrweb.core import numbers, queue, ratelimits
from smrweb.dashboard.access import project_for_user
from smrweb.tracking import services
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.models import AlertRule, Channel, Delivery, Role, Trigger
from smrweb.tracking.queries import alerts as alert_queries
from smrweb.tracking.services.alerts.triggers import TRIGGER_PARAMETERS

CHANNEL_HELP = {
    Channel.EMAIL: "to an address",
    Channel.SLACK: "incoming webhook",
    Channel.WEBHOOK: "signed JSON POST",
    Channel.INBOX: "a member's bell",
}


class AlertRuleForm(forms.Form):
    trigger = forms.ChoiceField(choices=Trigger.choices, label="When")
    threshold = forms.FloatField(required=False, label="Threshold")
    window = forms.IntegerField(required=False, label="Window")
    channel = forms.ChoiceField(choices=Channel.choices, initial=Channel.INBOX, label="Tell")
    target = forms.CharField(
        required=False,
        max_length=1000,
        label="Target",
        help_text="Email: an address. Slack and webhook: an http(s) URL on a public address.",
    )
    recipient = forms.CharField(
        required=False,
        max_length=150,
        label="Recipient (inbox)",
        help_text="The user name of a member of this project.",
    )
    delivery = forms.ChoiceField(
        required=False,
        choices=[("", "the trigger's default"), *Delivery.choices],
        label="Email delivery",
        help_text="Email rules of submission.needs_review, score.new_best and run.regressed send a digest "
        "(every 30 minutes unless you set the minutes); the others send each at once.",
    )
    digest_minutes = forms.IntegerField(
        required=False, min_value=5, max_value=24 * 60, label="Digest every (minutes)"
    )
    include_candidates = forms.BooleanField(
        required=False, label="score.new_best: announce unverified (candidate) scores too"
    )


def _default_text(trigger: str, default) -> str:
    if default is not None:
        return numbers.number(default)
    if trigger == Trigger.RUN_REGRESSED:
        return "the project's regression threshold"
    return "off"


def trigger_guide() -> list[dict]:
    """Each trigger, what it means, and what its threshold and window mean (with their defaults)."""
    return [
        {
            "value": value,
            "label": label,
            "parameters": [
                {
                    "name": name,
                    "meaning": spec.meaning,
                    # A meaning that names its default already ("default: the project's …") says it once.
                    "default": "" if "default" in spec.meaning else _default_text(value, spec.default),
                }
                for name, spec in TRIGGER_PARAMETERS.get(value, {}).items()
            ],
        }
        for value, label in Trigger.choices
    ]


def rule_parameters(rule: AlertRule) -> list[dict]:
    """The rule's threshold and window as it uses them: its own value, or the trigger's default."""
    shown = []
    for name, spec in TRIGGER_PARAMETERS.get(rule.trigger, {}).items():
        value = getattr(rule, name)
        shown.append(
            {
                "name": name,
                "meaning": spec.meaning,
                "value": numbers.number(value)
                if value is not None
                else _default_text(rule.trigger, spec.default),
                "is_default": value is None,
            }
        )
    return shown


@require_http_methods(["GET", "POST"])
@login_required
@never_cache
def project_alerts(request, slug: str):
    project = project_for_user(request, slug, role=Role.ADMIN)
    initial = {"channel": Channel.INBOX, "recipient": request.user.get_username()}
    form = AlertRuleForm(request.POST or None, initial=initial)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            data = form.cleaned_data
            inbox = data["channel"] == Channel.INBOX
            try:
                # The form shows both destination fields: each channel takes the one that is its own.
                rule = services.create_alert_rule(
                    project,
                    by=request.user,
                    trigger=data["trigger"],
                    channel=data["channel"],
                    target="" if inbox else data["target"],
                    recipient=data["recipient"] if inbox else None,
                    threshold=data["threshold"],
                    window=data["window"],
                    delivery=data["delivery"] or None,
                    digest_minutes=data["digest_minutes"],
                    include_candidates=data["include_candidates"],
                )
            except InvalidInput as exc:
                form.add_error(exc.field if exc.field in form.fields else None, exc.message)
            else:
                messages.success(request, f"Rule added: {rule.get_trigger_display()} → {rule.destination}.")
                return redirect(reverse("dashboard:project-alerts", args=[project.slug]) + f"#rule-{rule.pk}")
        status = 400
    rules = alert_queries.rules_with_log(project)
    for rule in rules:
        rule.parameters = rule_parameters(rule)
    context = {
        "project": project,
        "form": form,
        "rules": rules,
        "triggers": trigger_guide(),
        "channels": [(value, label, CHANNEL_HELP[value]) for value, label in Channel.choices],
        "members": project.members.order_by("username").values_list("username", flat=True),
        "log_size": alert_queries.DELIVERY_LOG,
    }
    return render(request, "dashboard/project_alerts.html", context, status=status)


def _rule_for(request, slug: str, rule_id: int) -> AlertRule:
    project = project_for_user(request, slug, role=Role.ADMIN)
    return get_object_or_404(
        AlertRule.objects.select_related("project", "recipient"), project=project, pk=rule_id
    )


def _back(rule: AlertRule, anchor: bool = True):
    url = reverse("dashboard:project-alerts", args=[rule.project.slug])
    return redirect(url + (f"#rule-{rule.pk}" if anchor else ""))


@require_POST
@login_required
def mute_alert_rule(request, slug: str, rule_id: int):
    """Mute (muted=1) or unmute (muted=0) a rule; episodes meanwhile are logged as suppressed."""
    rule = _rule_for(request, slug, rule_id)
    muted = request.POST.get("muted") == "1"
    services.update_alert_rule(rule, by=request.user, muted=muted)
    described = f"{rule.get_trigger_display()} → {rule.destination}"
    if muted:
        messages.success(request, f"Muted: {described}. What happens meanwhile is logged, not sent.")
    else:
        messages.success(request, f"Unmuted: {described}.")
    return _back(rule)


@require_POST
@login_required
def delete_alert_rule(request, slug: str, rule_id: int):
    rule = _rule_for(request, slug, rule_id)
    described = f"{rule.get_trigger_display()} → {rule.destination}"
    services.delete_alert_rule(rule, by=request.user)
    messages.success(request, f"Rule deleted: {described} (with its delivery log).")
    return _back(rule, anchor=False)


@require_POST
@login_required
def test_alert_rule(request, slug: str, rule_id: int):
    """A test notification through the rule's channel: the inbox gets it at once, other channels from a
    worker (its delivery shows in the rule's log)."""
    rule = _rule_for(request, slug, rule_id)
    if limited := ratelimits.alert_test(request):
        messages.error(request, f"No test sent: too many tests. {limited.message}")
        return _back(rule)
    notification = services.send_test(rule, by=request.user)
    if rule.channel == Channel.INBOX:
        messages.success(request, f"Test sent to the {rule.destination}.")
    elif queue.dispatch(tasks.deliver_notification, notification.pk):
        messages.success(request, f"Test queued for {rule.destination}; the log below shows how it went.")
    else:  # the notification is pending: the stale-action sweep queues it once the broker is back
        messages.warning(
            request,
            f"Test recorded for {rule.destination}, but the worker queue cannot be reached right now; "
            "it is sent as soon as the queue is back.",
        )
    return _back(rule)
