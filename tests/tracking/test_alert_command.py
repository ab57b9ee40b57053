"""`manage.py create_alert_rule`: one rule per call, printed; a webhook's secret on the last line; bad
input a CommandError naming the option, with nothing written."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from smrweb.tracking.models import AlertRule, AuditEvent

pytestmark = pytest.mark.django_db


def run_command(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("create_alert_rule", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_an_email_rule(project):
    out, _ = run_command("hill", "--on", "run.failed", "--email", "oncall@example.com")
    rule = AlertRule.objects.get()
    assert (rule.project, rule.trigger, rule.channel, rule.target) == (
        project,
        "run.failed",
        "email",
        "oncall@example.com",
    )
    assert rule.created_by is None and not rule.secret
    assert out == f"created alert rule {rule.pk} of project hill: run.failed → email oncall@example.com\n"
    assert AuditEvent.objects.get(verb="alert_rule.created").actor_label == "system"


def test_a_webhook_rule_prints_its_secret_on_the_last_line(project):
    out, err = run_command(
        "hill", "--on", "run.budget", "--threshold", "0.5", "--webhook", "https://hooks.example.com/a"
    )
    rule = AlertRule.objects.get()
    first, secret = out.splitlines()
    assert "run.budget → webhook https://hooks.example.com/a (threshold 0.5)" in first
    assert secret == rule.secret and len(secret) == 64
    assert "X-Smrweb-Signature" in err and secret not in err


def test_defaults_are_named(project):
    out, _ = run_command("hill", "--on", "run.no_progress", "--inbox", "bob")
    assert "inbox of bob (window 50 (default))" in out
    out, _ = run_command(
        "hill", "--on", "run.loop", "--window", "4", "--slack", "https://hooks.example.com/s"
    )
    assert "slack https://hooks.example.com/s (window 4)" in out
    assert AlertRule.objects.count() == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope", "--on", "run.failed", "--email", "a@example.com"], "No project 'nope'"),
        (["hill", "--on", "run.exploded", "--email", "a@example.com"], "--on: One of: run.failed"),
        (
            ["hill", "--on", "run.failed", "--window", "3", "--email", "a@example.com"],
            "--window: run.failed takes no window",
        ),
        (
            ["hill", "--on", "run.budget", "--threshold", "2", "--email", "a@example.com"],
            "--threshold: A number from 0.01 to 1",
        ),
        (["hill", "--on", "run.failed", "--email", "not-an-address"], "--email: A valid email address."),
        (["hill", "--on", "run.failed", "--inbox", "carol"], "--inbox: carol is not a member of hill."),
        (
            ["hill", "--on", "run.failed", "--webhook", "ftp://hooks.example.com/x"],
            "--webhook: Only http:// and https://",
        ),
        (["hill", "--on", "run.failed", "--slack", "http://10.0.0.1/x"], "--slack: "),
        (
            ["hill", "--on", "run.regressed", "--email", "a@example.com"],
            "--threshold: The project has no regression",
        ),
        (
            ["hill", "--on", "run.failed"],
            "one of the arguments --email --slack --webhook --inbox is required",
        ),
        (["hill", "--on", "run.failed", "--email", "a@example.com", "--inbox", "bob"], "not allowed with"),
        (
            ["hill", "--on", "run.budget", "--threshold", "most", "--email", "a@example.com"],
            "invalid float value",
        ),
    ],
)
def test_bad_input_is_a_command_error_naming_the_option(project, carol, settings, args, message):
    settings.SMRWEB_WEBHOOK_ALLOWED_HOSTS = ["hooks.example.com"]
    with pytest.raises(CommandError) as caught:
        run_command(*args)
    assert message in str(caught.value)
    assert not AlertRule.objects.exists()
    assert not AuditEvent.objects.filter(verb="alert_rule.created").exists()
