"""Who may call the API: project-scoped bearer tokens, session users by role, nobody anonymous."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from rest_framework.test import APIClient

from smrweb.tracking import services
from smrweb.tracking.models import ApiToken, AuditEvent, hash_token
from tests.api.helpers import assert_json_error, session_client

READS = [
    "/api/v1/projects/",
    "/api/v1/projects/hill/",
    "/api/v1/projects/hill/runs",
    "/api/v1/projects/hill/runs/r1",
    "/api/v1/projects/hill/runs/r1/turns",
    "/api/v1/projects/hill/runs/r1/metrics",
    "/api/v1/projects/hill/submissions",
    "/api/v1/scenarios/",
]


@pytest.fixture
def run(project):
    services.update_run_settings(project, "r1", git_branch="main")


def bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def as_user(username: str) -> APIClient:
    return session_client(get_user_model().objects.get(username=username))


@pytest.mark.parametrize("url", READS)
def test_every_read_answers_a_projects_token(api, run, url):
    assert api.get(url).status_code == 200


@pytest.mark.parametrize("url", READS)
def test_every_read_refuses_anonymous_requests_with_401_json(anon_api, run, url):
    body = assert_json_error(anon_api.get(url), 401)
    assert body["code"] == "not_authenticated"


@pytest.mark.parametrize("url", [u for u in READS if "/hill/" in u])
def test_another_projects_token_is_refused_with_403_json(other_project, run, url):
    _, raw = services.create_api_token(other_project, name="theirs")
    body = assert_json_error(bearer(raw).get(url), 403)
    assert body["code"] == "permission_denied"


def test_the_health_check_needs_no_credentials(anon_api, db):
    response = anon_api.get("/api/v1/health")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_a_revoked_token_is_refused_from_then_on(project, run):
    token, raw = services.create_api_token(project, name="short-lived")
    client = bearer(raw)
    assert client.get("/api/v1/projects/hill/runs").status_code == 200
    services.revoke_api_token(token)
    body = assert_json_error(client.get("/api/v1/projects/hill/runs"), 401)
    assert body["code"] == "authentication_failed"
    assert AuditEvent.objects.filter(verb="token.revoked", object_id=str(token.pk)).count() == 1


def test_revoking_twice_records_one_audit_event(project):
    token, _ = services.create_api_token(project, name="t")
    services.revoke_api_token(token)
    first = token.revoked_at
    services.revoke_api_token(token)
    assert token.revoked_at == first
    assert AuditEvent.objects.filter(verb="token.revoked").count() == 1


@pytest.mark.parametrize(
    "header",
    ["Bearer", "Bearer ", "Bearer a b", "bearer smr_not-a-real-token", "Bearer smr_\u00e9t\u00e9"],
    ids=["no token", "blank token", "three parts", "unknown token", "non-ascii token"],
)
def test_a_malformed_or_unknown_bearer_header_is_refused_with_401_json(anon_api, project, header):
    anon_api.credentials(HTTP_AUTHORIZATION=header)
    response = anon_api.get("/api/v1/projects/hill/runs")
    body = assert_json_error(response, 401)
    assert body["code"] == "authentication_failed"
    assert response["WWW-Authenticate"] == 'Bearer realm="smrweb"'


def test_a_non_bearer_scheme_is_not_authenticated(anon_api, project):
    anon_api.credentials(HTTP_AUTHORIZATION="Basic YWxpY2U6cHc=")
    assert assert_json_error(anon_api.get("/api/v1/projects/"), 401)["code"] == "not_authenticated"


def test_only_the_tokens_hash_is_stored(project):
    token, raw = services.create_api_token(project, name="ci2")
    assert raw.startswith(ApiToken.PREFIX)
    token.refresh_from_db()
    assert token.token_hash == hash_token(raw) and raw not in token.token_hash
    assert raw.startswith(token.hint) and len(token.hint) < len(raw)
    assert not ApiToken.objects.filter(token_hash=raw).exists()


def test_using_a_token_records_when_it_was_last_used(project, time_machine):
    token, raw = services.create_api_token(project, name="ci2")
    assert token.last_used_at is None
    bearer(raw).get("/api/v1/projects/")
    token.refresh_from_db()
    first = token.last_used_at
    assert first is not None
    time_machine.move_to(timezone.now() + timedelta(minutes=5))
    bearer(raw).get("/api/v1/projects/")
    token.refresh_from_db()
    assert token.last_used_at > first


def test_writes_by_a_token_are_audited_under_its_name(api, project):
    api.patch("/api/v1/projects/hill/runs/r1", {"git_branch": "dev"}, format="json")
    audit = AuditEvent.objects.get(verb="run.settings_changed")
    assert (audit.actor, audit.actor_label) == (None, "token:ci")


# --- session users by role ---------------------------------------------------------------------------


@pytest.mark.parametrize("username", ["alice", "bob", "victor"])
def test_every_member_may_read_the_projects_runs(project, run, username):
    response = as_user(username).get("/api/v1/projects/hill/runs/r1")
    assert response.status_code == 200
    assert response.json()["git_branch"] == "main"


def test_an_outsider_cannot_tell_the_project_exists(project, run, carol):
    for url in ("/api/v1/projects/hill/", "/api/v1/projects/hill/runs", "/api/v1/projects/hill/runs/r1"):
        assert assert_json_error(as_user("carol").get(url), 404)["code"] == "not_found"


@pytest.mark.parametrize(
    ("username", "status"), [("alice", 200), ("bob", 403), ("victor", 403), ("carol", 404)]
)
def test_only_project_admins_change_run_settings(project, run, carol, username, status):
    response = as_user(username).patch("/api/v1/projects/hill/runs/r1", {"budget_tokens": 5}, format="json")
    assert response.status_code == status
    assert (project.runs.get().budget_tokens == 5) == (status == 200)


def test_a_superuser_acts_as_admin_everywhere(project, run):
    from tests.factories import UserFactory

    root = UserFactory(username="root", is_superuser=True)
    client = APIClient()
    client.force_login(root)
    response = client.patch("/api/v1/projects/hill/runs/r1", {"budget_tokens": 7}, format="json")
    assert response.status_code == 200 and response.json()["budget_tokens"] == 7


def test_session_writes_need_a_csrf_token(project, alice):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(alice)
    response = client.patch("/api/v1/projects/hill/runs/r1", {"budget_tokens": 5}, format="json")
    body = assert_json_error(response, 403)
    assert "CSRF" in body["message"]
