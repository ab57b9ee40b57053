from django.core.management.base import BaseCommand, CommandError

from smrweb.tracking import services
from smrweb.tracking.errors import InvalidInput, TrackingError
from smrweb.tracking.models import Channel, Project, Trigger
from smrweb.tracking.services.alerts.triggers import TRIGGER_PARAMETERS, parameter

CHANNEL_OPTIONS = {
    Channel.EMAIL: "--email",
    Channel.SLACK: "--slack",
    Channel.WEBHOOK: "--webhook",
    Channel.INBOX: "--inbox",
}


def _parameters_help() -> str:
    lines = []
    for trigger, params in TRIGGER_PARAMETERS.items():
        for name, spec in params.items():
            default = "none" if spec.default is None else f"{spec.default:g}"
            lines.append(f"{trigger} --{name}: {spec.meaning} (default {default})")
    return "; ".join(lines)


class Command(BaseCommand):
    help = (
        "Create an alert rule: when TRIGGER happens in PROJECT, tell one destination. A --webhook rule's "
        "signing secret is printed once, on the last line."
    )

    def add_arguments(self, parser):
        parser.add_argument("project", help="the project's slug")
        parser.add_argument(
            "--on", dest="trigger", required=True, help=f"one of: {', '.join(Trigger.values)}"
        )
        parser.add_argument("--threshold", type=float, help=_parameters_help())
        parser.add_argument("--window", type=int, help="see --threshold for the triggers that take it")
        where = parser.add_mutually_exclusive_group(required=True)
        where.add_argument("--email", metavar="ADDR", help="send an email (through EMAIL_URL)")
        where.add_argument("--slack", metavar="URL", help="post to a Slack-compatible incoming webhook")
        where.add_argument("--webhook", metavar="URL", help="POST signed JSON (X-Smrweb-Signature)")
        where.add_argument("--inbox", metavar="USERNAME", help="the in-app inbox of a project member")

    def handle(self, *args, project, trigger, threshold, window, email, slack, webhook, inbox, **options):
        found = Project.objects.filter(slug=project).first()
        if found is None:
            raise CommandError(f"No project {project!r}.")
        given = {Channel.EMAIL: email, Channel.SLACK: slack, Channel.WEBHOOK: webhook, Channel.INBOX: inbox}
        channel, value = next((c, v) for c, v in given.items() if v is not None)
        try:
            rule = services.create_alert_rule(
                found,
                by=None,
                trigger=trigger,
                channel=channel,
                target="" if channel == Channel.INBOX else value,
                recipient=value if channel == Channel.INBOX else None,
                threshold=threshold,
                window=window,
            )
        except InvalidInput as exc:
            option = {
                "trigger": "--on",
                "threshold": "--threshold",
                "window": "--window",
                "target": CHANNEL_OPTIONS[channel],
                "recipient": "--inbox",
            }.get(exc.field, exc.field)
            raise CommandError(f"{option}: {exc.message}") from None
        except TrackingError as exc:
            raise CommandError(exc.message) from None
        settings = [
            f"{name} {parameter(rule, name):g}" + ("" if getattr(rule, name) is not None else " (default)")
            for name in TRIGGER_PARAMETERS.get(rule.trigger, {})
            if parameter(rule, name) is not None
        ]
        self.stdout.write(
            f"created alert rule {rule.pk} of project {found.slug}: {rule.trigger} → {rule.destination}"
            + (f" ({', '.join(settings)})" if settings else "")
        )
        if rule.channel == Channel.WEBHOOK:
            self.stderr.write(
                "signing secret (the receiver checks X-Smrweb-Signature with it); admins read it again "
                f"at GET /api/v1/projects/{found.slug}/alert-rules/{rule.pk}/:"
            )
            self.stdout.write(rule.secret)
