"""Project settings (review, regression, rollback webhook): admins only, validated, audited."""

import pytest

from smrweb.tracking.models import AuditEvent, Project
from smrweb.tracking.services import rollbacks

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
    assert rollbacks.webhook_secret(project) in body


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


# --- members (walkthrough P1-14: adding a teammate needed raw Django admin) ------------------------------


def test_an_admin_adds_changes_and_removes_members_and_the_project_keeps_an_admin(
    client_alice, project, alice, carol
):
    from smrweb.tracking.models import AuditEvent, Membership

    page = client_alice.get("/projects/hill/settings/").content.decode()
    assert 'id="members"' in page and 'data-member="bob"' in page and 'data-member="victor"' in page
    response = client_alice.post("/projects/hill/members", {"username": "carol", "role": "reviewer"})
    assert response.status_code == 302 and response["Location"].endswith("/settings/#members")
    assert Membership.objects.get(project=project, user=carol).role == "reviewer"
    client_alice.post("/projects/hill/members", {"username": "carol", "role": "viewer"})
    assert Membership.objects.get(project=project, user=carol).role == "viewer"
    response = client_alice.post("/projects/hill/members", {"username": "nobody-here", "role": "viewer"})
    assert response.status_code == 400 and "No active account is called" in response.content.decode()
    response = client_alice.post("/projects/hill/members", {"username": "alice", "role": "viewer"})
    assert response.status_code == 400 and "only admin" in response.content.decode()
    membership = Membership.objects.get(project=project, user=carol)
    client_alice.post("/projects/hill/members", {"action": "remove", "membership": membership.pk})
    assert not Membership.objects.filter(project=project, user=carol).exists()
    assert list(
        AuditEvent.objects.filter(verb__startswith="member.", detail__user="carol")
        .values_list("verb", flat=True)
        .order_by("id")
    ) == ["member.set", "member.set", "member.removed"]
    own = Membership.objects.get(project=project, user=alice)
    response = client_alice.post(
        "/projects/hill/members", {"action": "remove", "membership": own.pk}, follow=True
    )
    assert "only admin" in response.content.decode() and Membership.objects.filter(pk=own.pk).exists()
