"""Project settings (review, regression, rollback webhook): admins only, validated, audited."""

import pytest

from smrweb.outbound import webhooks
from smrweb.tracking.models import AuditEvent, Project

pytestmark = pytest.mark.django_db
URL = "/projects/hill/settings/"


def test_only_admins_see_and_change_settings(client, bob, victor, carol, project):
    for user, status in [(carol, 404), (victor, 403), (bob, 403)]:
        client.force_login(user)
        assert client.get(URL).status_code == status
        assert client.post(URL, {"regression_threshold": "1"}).status_code == status
    assert Project.objects.get(pk=project.pk).regression_threshold is None


def test_an_admin_saves_settings_and_the_change_is_audited(client_alice, project):
    response = client_alice.post(
        URL,
        {
            "require_second_reviewer": "on",
            "regression_threshold": "0.05",
            "rollback_webhook_url": "https://harness.example/rollback",
        },
        follow=True,
    )
    assert "Settings saved." in response.content.decode()
    project.refresh_from_db()
    assert project.require_second_reviewer and project.regression_threshold == 0.05
    assert project.rollback_webhook_url == "https://harness.example/rollback"
    event = AuditEvent.objects.get(verb="project.settings_changed")
    assert event.detail["regression_threshold"] == "0.05"


def test_the_page_shows_the_webhook_signing_secret(client_alice, project):
    body = client_alice.get(URL).content.decode()
    assert webhooks.webhook_secret(project) in body


@pytest.mark.parametrize(
    "data",
    [
        {"regression_threshold": "-1"},
        {"regression_threshold": "nan"},
        {"regression_threshold": "abc"},
        {"rollback_webhook_url": "ftp://x.example/"},
        {"rollback_webhook_url": "not a url"},
    ],
)
def test_bad_settings_are_form_errors_and_nothing_changes(client_alice, project, data):
    response = client_alice.post(URL, data)
    assert response.status_code == 400
    assert 'class="form-error"' in response.content.decode()
    project.refresh_from_db()
    assert project.regression_threshold is None and project.rollback_webhook_url == ""
    assert not AuditEvent.objects.filter(verb="project.settings_changed").exists()
