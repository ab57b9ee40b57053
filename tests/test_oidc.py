"""Single sign-on (docs/sso.md) without a browser: the discovery document's cache, who a sign-in is
(identities, user-name collisions, verified email), the projects claim, `next`, failures at the provider
ending on the sign-in page, and SSO off meaning no button, no URLs and no backend.

The end-to-end sign-in against a real provider is tests/browser/test_oidc.py. Here the discovery document
comes from a real HTTP server on loopback; the claims a provider would tell are given to the backend."""

from __future__ import annotations

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import jwt
import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from django.test import Client
from django.urls import NoReverseMatch, reverse
from jwcrypto import jwk

from smrweb.dashboard import sso
from smrweb.dashboard.models import SsoIdentity
from smrweb.tracking import services
from smrweb.tracking.models import AuditEvent, Membership, Role
from tests.factories import UserFactory, admin_project
from tests.oidc_provider import sso_enabled

pytestmark = pytest.mark.django_db

User = get_user_model()


class Discovery:
    """A discovery document served over real HTTP on loopback, counting the requests for it."""

    def __init__(self):
        self.hits = 0
        self.key = jwk.JWK.generate(kty="RSA", size=2048, kid="k1", alg="RS256")
        self.public_jwk = json.loads(self.key.export_public())
        self.status = 200
        self.issuer_override: str | None = None
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path.endswith("/jwks.json"):
                    body = json.dumps({"keys": [outer.public_jwk]}).encode()
                else:
                    outer.hits += 1
                    body = json.dumps(outer.document()).encode()
                self.send_response(outer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.server.server_port}/o"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def document(self) -> dict:
        return {
            "issuer": self.issuer_override or self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize/",
            "token_endpoint": f"{self.issuer}/token/",
            "userinfo_endpoint": f"{self.issuer}/userinfo/",
            "jwks_uri": f"{self.issuer}/.well-known/jwks.json",
        }


@pytest.fixture
def idp():
    server = Discovery()
    yield server
    server.server.shutdown()
    server.server.server_close()


@pytest.fixture
def sso_on(settings, idp):
    with sso_enabled(settings, idp.issuer, "client-1", "secret-1", SMRWEB_OIDC_PROJECTS_CLAIM="groups"):
        yield idp


class ClaimsBackend(sso.Backend):
    """The real backend with the provider's answer (token, ID token, userinfo) replaced by given claims."""

    def __init__(self, claims: dict):
        super().__init__()
        self.claims = claims

    def get_userinfo(self, access_token, id_token, payload):
        return dict(self.claims)


def id_token(idp: Discovery, **claims) -> str:
    now = int(time.time())
    payload = {"iss": idp.issuer, "aud": "client-1", "sub": "42", "nonce": "n1", "iat": now, "exp": now + 60}
    pem = idp.key.export_to_pem(private_key=True, password=None)
    return jwt.encode({**payload, **claims}, pem, algorithm="RS256", headers={"kid": "k1"})


def sign_in(claims: dict):
    return ClaimsBackend(claims).get_or_create_user("access", "id", claims)


# --- discovery ----------------------------------------------------------------------------------


def test_discovery_is_fetched_once_then_served_from_the_cache(sso_on):
    assert sso_on.hits == 0  # enabling SSO (settings, URLs, a backend) asked the provider nothing
    sso.Backend()  # Django builds one per request of a signed-in person: no request either
    assert sso_on.hits == 0
    first = sso.discovery()
    second = sso.discovery()
    assert first["token_endpoint"] == f"{sso_on.issuer}/token/"
    assert second is first and sso_on.hits == 1
    assert sso.setting("OIDC_OP_JWKS_ENDPOINT") == f"{sso_on.issuer}/.well-known/jwks.json"
    assert sso_on.hits == 1


def test_discovery_is_fetched_again_after_its_ttl(sso_on, settings):
    settings.SMRWEB_OIDC_DISCOVERY_TTL = 0
    sso.discovery()
    sso.discovery()
    assert sso_on.hits == 2


def test_a_failed_discovery_is_not_cached_and_says_why(sso_on):
    sso_on.status = 503
    with pytest.raises(sso.SsoUnavailable, match="could not be read"):
        sso.discovery()
    sso_on.status = 200
    assert sso.discovery()["issuer"] == sso_on.issuer
    assert sso_on.hits == 2


def test_a_discovery_document_for_another_issuer_is_refused(sso_on):
    sso_on.issuer_override = "http://elsewhere.example/o"
    with pytest.raises(sso.SsoUnavailable, match="elsewhere.example"):
        sso.discovery()


def test_the_sign_in_button_leads_to_the_provider_with_pkce_and_a_same_host_next(sso_on):
    client = Client()
    page = client.get("/login/?next=/projects/hill/")
    assert b"Sign in with single sign-on" in page.content
    assert b'href="/oidc/login/?next=/projects/hill/"' in page.content

    response = client.get("/oidc/login/?next=/projects/hill/")
    assert response.status_code == 302
    location = urlsplit(response["Location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == f"{sso_on.issuer}/authorize/"
    query = parse_qs(location.query)
    assert query["client_id"] == ["client-1"]
    assert query["redirect_uri"] == ["http://testserver/oidc/callback/"]
    assert query["code_challenge_method"] == ["S256"] and query["scope"] == ["openid email profile"]
    assert client.session["oidc_login_next"] == "/projects/hill/"

    for unsafe in ("https://evil.example/", "//evil.example/x", "http://testserver.evil.example/"):
        client.get("/oidc/login/", {"next": unsafe})
        assert client.session["oidc_login_next"] is None, unsafe


def test_an_unreachable_provider_returns_to_the_sign_in_page_with_the_reason(sso_on):
    sso_on.status = 500
    response = Client().get("/oidc/login/?next=/projects/hill/", follow=True)
    assert response.redirect_chain[-1] == ("/login/?next=%2Fprojects%2Fhill%2F", 302)
    assert b"Single sign-on is unavailable: the provider" in response.content


@pytest.mark.parametrize(
    "query, shown",
    [
        ("?error=access_denied&error_description=The+user+said+no", b"(The user said no)"),
        ("?code=abc&state=never-issued", b"Single sign-on did not sign you in."),
        ("", b"Single sign-on did not sign you in."),
    ],
)
def test_a_refusal_or_a_bad_callback_returns_to_the_sign_in_page(sso_on, query, shown):
    client = Client()
    client.get("/oidc/login/")  # a state in the session, so the unknown one is a mismatch, not a first visit
    response = client.get(f"/oidc/callback/{query}", follow=True)
    assert response.redirect_chain[-1] == ("/login/", 302)
    assert shown in response.content
    assert "_auth_user_id" not in client.session


def test_the_password_form_never_reaches_the_sso_backend(sso_on, alice):
    assert sso.Backend().authenticate(None, username="alice", password="pw-for-tests-only") is None
    client = Client()
    response = client.post("/login/?code=x&state=y", {"username": "alice", "password": "pw-for-tests-only"})
    assert response.status_code == 302
    assert client.session["_auth_user_backend"] == "django.contrib.auth.backends.ModelBackend"


def test_the_id_token_is_checked_for_signature_issuer_audience_expiry_and_nonce(sso_on):
    backend = sso.Backend()
    assert backend.verify_token(id_token(sso_on), nonce="n1")["sub"] == "42"
    refused = {
        "another issuer": (id_token(sso_on, iss="http://elsewhere.example/o"), "n1"),
        "another client": (id_token(sso_on, aud=["client-2"]), "n1"),
        "expired": (id_token(sso_on, exp=int(time.time()) - 120), "n1"),
        "another nonce": (id_token(sso_on), "n2"),
        "tampered": (id_token(sso_on)[:-4] + "AAAA", "n1"),
    }
    for what, (token, nonce) in refused.items():
        with pytest.raises((SuspiciousOperation, jwt.InvalidTokenError)):
            backend.verify_token(token, nonce=nonce)
            pytest.fail(what)


# --- who a sign-in is ----------------------------------------------------------------------------


def test_a_first_sign_in_creates_a_user_and_the_next_finds_them_by_subject(sso_on):
    user = sign_in(
        {"sub": "42", "preferred_username": "dana", "email": "dana@example.org", "email_verified": True}
    )
    assert (user.username, user.email, user.has_usable_password()) == ("dana", "dana@example.org", False)
    assert SsoIdentity.objects.get(user=user).subject == "42"
    again = sign_in({"sub": "42", "preferred_username": "dana.renamed", "email": "d@example.org"})
    assert again.pk == user.pk
    assert User.objects.get(pk=user.pk).email == "dana@example.org"  # unverified: not taken over
    verbs = list(AuditEvent.objects.filter(object_id=str(user.pk)).values_list("verb", flat=True))
    assert sorted(verbs) == ["user.created", "user.sso_linked"]


def test_user_name_collisions_get_a_numeric_suffix(sso_on):
    UserFactory(username="erin")
    UserFactory(username="Erin-2")
    user = sign_in({"sub": "s1", "preferred_username": "erin"})
    assert user.username == "erin-3"
    assert sign_in({"sub": "s2", "preferred_username": "erin"}).username == "erin-4"
    assert sign_in({"sub": "s3", "email": "fay@example.org"}).username == "fay@example.org"
    assert sign_in({"sub": "s4", "preferred_username": "g h/<i>"}).username == "ghi"
    assert sign_in({"sub": "s5"}).username == "user"


def test_only_a_verified_email_links_an_existing_account_and_never_a_superuser(sso_on, alice):
    not_verified = sign_in({"sub": "a1", "preferred_username": "x", "email": alice.email})
    assert not_verified.pk != alice.pk and not_verified.email == ""
    verified = sign_in(
        {"sub": "a2", "preferred_username": "x", "email": alice.email.upper(), "email_verified": True}
    )
    assert verified.pk == alice.pk
    root = User.objects.create_superuser("root", "root@example.org", "pw-root-123")
    other = sign_in({"sub": "a3", "email": "root@example.org", "email_verified": "true"})
    assert other.pk != root.pk


def test_a_verified_email_never_links_an_account_holding_site_rights(sso_on):
    """Finding N11: staff, and accounts granted site permissions directly or through a group, are not
    linked by email (whoever controls the address at the provider would inherit them); a plain account
    with the same kind of address still is."""
    from django.contrib.auth.models import Group, Permission

    staff = User.objects.create_user("staff", "staff@example.org", is_staff=True)
    granted = User.objects.create_user("granted", "granted@example.org")
    granted.user_permissions.add(Permission.objects.get(codename="add_project"))
    grouped = User.objects.create_user("grouped", "grouped@example.org")
    binders = Group.objects.create(name="binders")
    binders.permissions.add(Permission.objects.get(codename="bind_source"))
    grouped.groups.add(binders)
    plain = User.objects.create_user("plain", "plain@example.org")
    plain.groups.add(Group.objects.create(name="no-rights"))  # a group without permissions is no right
    for n, user in enumerate((staff, granted, grouped, plain)):
        signed_in = sign_in({"sub": f"n11-{n}", "email": user.email, "email_verified": True})
        if user is plain:
            assert signed_in.pk == plain.pk
        else:
            assert signed_in.pk != user.pk, user.username
            assert not (
                signed_in.is_staff or signed_in.user_permissions.exists() or signed_in.groups.exists()
            )


# --- the projects claim -------------------------------------------------------------------------


def test_the_claim_grants_memberships_in_either_form(sso_on, alice, project):
    lab = admin_project("lab", by=alice)
    user = sign_in({"sub": "p1", "preferred_username": "gus", "groups": ["hill:reviewer", "lab"]})
    assert dict(Membership.objects.filter(user=user).values_list("project__slug", "role")) == {
        "hill": "reviewer",
        "lab": "viewer",
    }
    event = AuditEvent.objects.filter(verb="member.set", detail__user="gus", project=project).get()
    assert (event.actor, event.actor_label, event.detail["role"]) == (None, "system", "reviewer")

    sign_in({"sub": "p1", "groups": {"hill": "admin", "lab": "viewer"}})
    assert dict(Membership.objects.filter(user=user).values_list("project__slug", "role")) == {
        "hill": "admin",
        "lab": "viewer",
    }
    assert AuditEvent.objects.filter(verb="member.set", detail__user="gus", project=lab).count() == 1


def test_a_project_the_claim_leaves_out_is_kept(sso_on, project):
    user = sign_in({"sub": "p2", "groups": ["hill:reviewer"]})
    sign_in({"sub": "p2", "groups": []})
    assert Membership.objects.get(user=user, project=project).role == Role.REVIEWER


def test_malformed_claims_are_ignored_and_logged(sso_on, project, caplog):
    caplog.set_level(logging.WARNING, logger="smrweb.tracking.services.sso")
    user = sign_in({"sub": "p3", "preferred_username": "hal", "groups": "hill:admin"})
    assert not Membership.objects.filter(user=user).exists()
    assert "expected a list or an object, got str" in caplog.text

    caplog.clear()
    sign_in({"sub": "p3", "groups": ["hill:owner", 7, "nowhere:viewer", ":admin", "hill:Reviewer"]})
    assert Membership.objects.get(user=user, project=project).role == Role.REVIEWER
    for problem in (
        "unknown role 'owner'",
        "entry 7 is not a string",
        "nowhere: no such project",
        "entry ''",
    ):
        assert problem in caplog.text


def test_the_claim_never_demotes_a_projects_only_admin(sso_on, alice, caplog):
    solo = services.create_project("solo")
    user = sign_in({"sub": "p4", "preferred_username": "ivy", "groups": ["solo:admin"]})
    assert Membership.objects.get(user=user, project=solo).role == Role.ADMIN
    sign_in({"sub": "p4", "groups": ["solo:viewer"]})
    assert Membership.objects.get(user=user, project=solo).role == Role.ADMIN
    assert "the project's only admin: kept admin" in caplog.text
    services.add_member(solo, alice, role=Role.ADMIN)
    sign_in({"sub": "p4", "groups": ["solo:viewer"]})
    assert Membership.objects.get(user=user, project=solo).role == Role.VIEWER


def test_no_claim_configured_changes_no_membership(sso_on, settings, project):
    settings.SMRWEB_OIDC_PROJECTS_CLAIM = ""
    user = sign_in({"sub": "p5", "groups": ["hill:admin"]})
    assert not Membership.objects.filter(user=user).exists()


# --- off ----------------------------------------------------------------------------------------


def test_sso_off_means_no_button_no_urls_and_no_backend(settings):
    from smrweb import settings as configured

    assert settings.SMRWEB_OIDC_ISSUER == ""
    assert configured.AUTHENTICATION_BACKENDS == ["django.contrib.auth.backends.ModelBackend"]
    page = Client().get("/login/")
    assert page.status_code == 200 and b"Sign in with" not in page.content and b"/oidc/" not in page.content
    for url in ("/oidc/login/", "/oidc/callback/?code=a&state=b"):
        assert Client().get(url).status_code == 404
    for name in ("sso-start", "sso-callback"):
        with pytest.raises(NoReverseMatch):
            reverse(name)


def test_a_callback_no_sign_in_of_this_browser_asked_for_signs_nobody_out(sso_on, alice):
    client = Client()
    client.force_login(alice)
    response = client.get("/oidc/callback/?error=access_denied&state=forged")
    assert response.status_code == 302 and response["Location"] == "/login/"
    assert client.session["_auth_user_id"] == str(alice.pk)


def test_sso_urls_for_every_kind_of_caller(sso_on, project, alice, bob, victor, carol):
    """The permission matrix's callers (tests/test_permission_matrix.py) on the two sign-on URLs, which are
    public by nature: starting goes to the provider for anyone; a callback without a pending sign-in
    goes back to the sign-in page and changes nothing (nobody is signed in or out, nothing is written)."""
    audit_rows = AuditEvent.objects.count()
    for user in (None, carol, victor, bob, alice):
        client = Client()
        if user:
            client.force_login(user)
        start = client.get("/oidc/login/")
        assert start.status_code == 302 and start["Location"].startswith(f"{sso_on.issuer}/authorize/?")
        back = client.get("/oidc/callback/?code=stolen&state=guessed")
        assert back.status_code == 302 and back["Location"] == "/login/"
        assert client.session.get("_auth_user_id") == (str(user.pk) if user else None)
        api = Client(headers={"Authorization": "Bearer not-a-token"})
        assert api.get("/oidc/callback/?code=x&state=y").status_code == 302
    assert AuditEvent.objects.count() == audit_rows
    assert not SsoIdentity.objects.exists()


def test_check_deploy_warns_about_a_plain_http_issuer(settings):
    from smrweb.core.checks import sso_issuer_over_https

    assert sso_issuer_over_https(None) == []
    settings.SMRWEB_OIDC_ISSUER = "http://id.lab.example/realms/lab"
    assert [w.id for w in sso_issuer_over_https(None)] == ["smrweb.W190"]
    settings.SMRWEB_OIDC_ISSUER = "https://id.lab.example/realms/lab"
    assert sso_issuer_over_https(None) == []
