"""The run page's archive card and the metric panel's downsampling note (docs/retention.md)."""

from django import template

from smrweb.tracking import services
from smrweb.tracking.models import Role

register = template.Library()


@register.inclusion_tag("dashboard/partials/run_archive.html", takes_context=True)
def run_archive_card(context, run):
    user = context["request"].user
    # The run page read the person's role once (is_admin, can_snooze = reviewer or more): no query here.
    have = Role.ADMIN if context.get("is_admin") else Role.REVIEWER if context.get("can_snooze") else None
    refusal = services.archive_refusal(user, run, have=have)
    return {
        "run": run,
        "can_archive": not refusal,
        # A reviewer is told why a live run has no archive button; a viewer sees nothing.
        "archive_refusal": refusal if have else "",
        "can_delete": services.may_delete(user, run, have=have),
        "csrf_token": context.get("csrf_token"),
    }


@register.simple_tag
def downsampled_note(run, key) -> str:
    """ "Downsampled by retention from N points" when the series was cut, else ""."""
    cut = (run.metrics_downsampled or {}).get(key)
    if not cut:
        return ""
    return f"Downsampled by the retention policy: {cut['kept']} of {cut['of']} points kept."
