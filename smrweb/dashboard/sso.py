"""Single sign-on with an OpenID Connect provider (docs/sso.md), through mozilla-django-oidc.

Off unless SMRWEB_OIDC_ISSUER is set: then settings add `Backend` to AUTHENTICATION_BACKENDS, smrweb/urls.py
adds `urlpatterns()` and the sign-in page shows "Sign in with <SMRWEB_OIDC_BUTTON_LABEL>".

mozilla-django-oidc wants the provider's endpoints as settings; here they come from the issuer's discovery
document, fetched when first needed and kept for SMRWEB_OIDC_DISCOVERY_TTL seconds per process (settings
import does no network I/O, and Django builds a backend for every request of a signed-in person, so the
backend reads endpoints only while it signs someone in). The subclasses below only (1) read settings from
the SMRWEB_OIDC_* names and endpoints from discovery, (2) find or create the user (`Backend`), and (3) turn
a failure at the provider into the sign-in page with a message instead of an error page.

Who a sign-in is: the provider's (issuer, subject) pair, kept in `SsoIdentity`. The first sign-in links an
existing account only by an email address the provider says is verified (`email_verified`), and never a
superuser's; otherwise it creates a user named after `preferred_username` (or the email), made unique with
a numeric suffix, with no usable password. An unverified email address is not stored.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any

import jwt
import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from django.db import IntegrityError, transaction
from django.shortcuts import redirect
from django.urls import path, reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.views.generic import View
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from smrweb.dashboard.models import SsoIdentity
from smrweb.tracking import services
from smrweb.tracking.models import AuditVerb

logger = logging.getLogger(__name__)

ENDPOINTS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}
REQUIRED = ("authorization_endpoint", "token_endpoint", "jwks_uri")


def enabled() -> bool:
    return bool(settings.SMRWEB_OIDC_ISSUER)


class SsoUnavailable(Exception):
    """The provider's discovery document could not be read or is not usable."""


_discovery: dict[str, tuple[float, dict]] = {}
_discovery_lock = threading.Lock()


def discovery() -> dict:
    """The issuer's discovery document, fetched at most once per SMRWEB_OIDC_DISCOVERY_TTL in this process
    (a failure is not kept: the next sign-in asks again). Raises SsoUnavailable."""
    issuer = settings.SMRWEB_OIDC_ISSUER
    with _discovery_lock:
        fetched_at, document = _discovery.get(issuer, (0.0, {}))
        if document and time.monotonic() - fetched_at < settings.SMRWEB_OIDC_DISCOVERY_TTL:
            return document
        url = f"{issuer}/.well-known/openid-configuration"
        try:
            response = requests.get(url, timeout=settings.SMRWEB_OIDC_TIMEOUT)
            response.raise_for_status()
            document = response.json()
        except (requests.RequestException, ValueError) as exc:
            logger.warning("SSO discovery %s failed: %s", url, exc)
            raise SsoUnavailable(f"the provider's discovery document could not be read ({exc})") from exc
        if not isinstance(document, dict) or document.get("issuer", "").rstrip("/") != issuer:
            got = document.get("issuer") if isinstance(document, dict) else None
            raise SsoUnavailable(f"the discovery document names issuer {got!r}, not {issuer!r}")
        if missing := [key for key in REQUIRED if not isinstance(document.get(key), str)]:
            raise SsoUnavailable(f"the discovery document has no {', '.join(missing)}")
        _discovery[issuer] = (time.monotonic(), document)
        return document


def forget_discovery() -> None:
    with _discovery_lock:
        _discovery.clear()


def setting(attr: str, *default: Any) -> Any:
    """mozilla-django-oidc's settings, from smrweb's names and the discovery document."""
    if attr in ENDPOINTS:
        return discovery().get(ENDPOINTS[attr])
    fixed = {
        "OIDC_RP_CLIENT_ID": settings.SMRWEB_OIDC_CLIENT_ID,
        "OIDC_RP_CLIENT_SECRET": settings.SMRWEB_OIDC_CLIENT_SECRET,
        "OIDC_RP_SCOPES": settings.SMRWEB_OIDC_SCOPES,
        "OIDC_RP_SIGN_ALGO": settings.SMRWEB_OIDC_SIGN_ALGO,
        "OIDC_TIMEOUT": settings.SMRWEB_OIDC_TIMEOUT,
        "OIDC_USE_NONCE": True,
        "OIDC_USE_PKCE": True,
        "OIDC_AUTHENTICATION_CALLBACK_URL": "sso-callback",
        "OIDC_REDIRECT_FIELD_NAME": "next",
        "OIDC_REDIRECT_ALLOWED_HOSTS": [],  # `next` stays on this host
        "OIDC_STORE_ACCESS_TOKEN": False,
        "OIDC_STORE_ID_TOKEN": False,
    }
    if attr in fixed:
        return fixed[attr]
    return import_from_settings(attr, *default)


def _verified(claims: dict) -> bool:
    return claims.get("email_verified") in (True, "true", "True")


USERNAME_UNSAFE = re.compile(r"[^\w.@+-]")


def _username_base(claims: dict) -> str:
    for candidate in (claims.get("preferred_username"), claims.get("email")):
        if isinstance(candidate, str) and (name := USERNAME_UNSAFE.sub("", candidate.strip())[:140]):
            return name
    return "user"


class Backend(OIDCAuthenticationBackend):
    """Signs in the person the provider's ID token names; see the module docstring for who that is."""

    get_settings = staticmethod(setting)

    def __init__(self, *args, **kwargs):
        # Not the parent's: that reads every endpoint, and Django builds a backend per request.
        self.UserModel = get_user_model()
        self.OIDC_RP_CLIENT_ID = settings.SMRWEB_OIDC_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.SMRWEB_OIDC_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.SMRWEB_OIDC_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None

    OIDC_OP_TOKEN_ENDPOINT = property(lambda self: setting("OIDC_OP_TOKEN_ENDPOINT"))
    OIDC_OP_USER_ENDPOINT = property(lambda self: setting("OIDC_OP_USER_ENDPOINT"))
    OIDC_OP_JWKS_ENDPOINT = property(lambda self: setting("OIDC_OP_JWKS_ENDPOINT"))

    def authenticate(self, request, **kwargs):
        if "nonce" not in kwargs:  # only the callback view signs in through here, never a password form
            return None
        return super().authenticate(request, **kwargs)

    def verify_token(self, token, **kwargs):
        """The parent checks the signature, expiry and nonce; the issuer and audience are checked here."""
        payload = super().verify_token(token, **kwargs)
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if str(payload.get("iss", "")).rstrip("/") != settings.SMRWEB_OIDC_ISSUER:
            raise SuspiciousOperation(f"the ID token is from issuer {payload.get('iss')!r}")
        if self.OIDC_RP_CLIENT_ID not in audiences:
            raise SuspiciousOperation("the ID token is for another client")
        return payload

    def get_userinfo(self, access_token, id_token, payload):
        """The ID token's claims, with the userinfo endpoint's (when the provider has one) over them."""
        claims = dict(payload)
        if self.OIDC_OP_USER_ENDPOINT:
            userinfo = super().get_userinfo(access_token, id_token, payload)
            if str(userinfo.get("sub")) != str(payload.get("sub")):
                raise SuspiciousOperation("userinfo is about another subject than the ID token")
            claims.update(userinfo)
        return claims

    def verify_claims(self, claims):
        return isinstance(claims.get("sub"), (str, int)) and str(claims["sub"]) != ""

    def get_or_create_user(self, access_token, id_token, payload):
        claims = self.get_userinfo(access_token, id_token, payload)
        if not self.verify_claims(claims):
            raise SuspiciousOperation("the provider's claims have no subject")
        issuer, subject = settings.SMRWEB_OIDC_ISSUER, str(claims["sub"])
        with transaction.atomic():
            identity = (
                SsoIdentity.objects.select_related("user").filter(issuer=issuer, subject=subject).first()
            )
            if identity is None:
                user = self._linkable_user(claims, issuer) or self._create_user(claims)
                identity = SsoIdentity.objects.create(user=user, issuer=issuer, subject=subject)
                services.record_audit(
                    None,
                    AuditVerb.USER_SSO_LINKED,
                    user,
                    user=user.get_username(),
                    issuer=issuer,
                    subject=subject,
                )
            user = identity.user
            email = claims.get("email")
            if _verified(claims) and isinstance(email, str) and email and email != user.email:
                user.email = email[:254]
                user.save(update_fields=["email"])
            identity.last_login = timezone.now()
            identity.save(update_fields=["last_login"])
        if user.is_active and (claim := settings.SMRWEB_OIDC_PROJECTS_CLAIM) and claim in claims:
            services.apply_project_claim(user, claims[claim], claim=claim)
        return user

    def _linkable_user(self, claims: dict, issuer: str):
        """An existing account with the same provider-verified email address, not yet linked here.

        Never one that holds more than project roles (finding N11): a superuser, a staff member, or an
        account granted site permissions (`add_project`, `bind_source`…) directly or through a group.
        Whoever controls an address at the provider would otherwise inherit those rights; such an
        account gets a new, plain one instead."""
        email = claims.get("email")
        if not (_verified(claims) and isinstance(email, str) and email):
            return None
        users = list(
            self.UserModel.objects.filter(
                email__iexact=email,
                is_active=True,
                is_superuser=False,
                is_staff=False,
                user_permissions__isnull=True,
                groups__permissions__isnull=True,
            )
            .exclude(sso_identities__issuer=issuer)
            .distinct()[:2]
        )
        return users[0] if len(users) == 1 else None

    def _create_user(self, claims: dict):
        base = _username_base(claims)
        email = claims.get("email") if _verified(claims) and isinstance(claims.get("email"), str) else ""
        for n in range(1, 1000):
            username = base if n == 1 else f"{base}-{n}"
            if self.UserModel.objects.filter(username__iexact=username).exists():
                continue
            try:
                with transaction.atomic():
                    user = self.UserModel.objects.create_user(username, email=email[:254])
            except IntegrityError:  # taken between the check and the insert
                continue
            services.record_audit(None, AuditVerb.USER_CREATED, user, user=username, via="sso")
            return user
        raise SuspiciousOperation(f"no free user name like {base!r}")


def _to_login(request, message: str, next_url: str = ""):
    messages.error(request, message)
    url = reverse("login")
    if next_url and url_has_allowed_host_and_scheme(next_url, {request.get_host()}, request.is_secure()):
        url += "?" + urlencode({"next": next_url})
    return redirect(url)


class SsoStart(OIDCAuthenticationRequestView):
    """Sends the browser to the provider (state, nonce and PKCE in the session); a safe `next` is kept."""

    get_settings = staticmethod(setting)

    def __init__(self, **kwargs):
        View.__init__(self, **kwargs)  # not the parent's: that reads the endpoint at construction
        self.OIDC_RP_CLIENT_ID = settings.SMRWEB_OIDC_CLIENT_ID

    def get(self, request):
        try:
            self.OIDC_OP_AUTH_ENDPOINT = discovery()["authorization_endpoint"]
        except SsoUnavailable as exc:
            return _to_login(request, f"Single sign-on is unavailable: {exc}.", request.GET.get("next", ""))
        return super().get(request)


class SsoCallback(OIDCAuthenticationCallbackView):
    """Where the provider sends the browser back; a refusal or a failure returns to the sign-in page."""

    get_settings = staticmethod(setting)

    def get(self, request):
        if request.GET.get("state") not in request.session.get("oidc_states", {}):
            # Not the answer to a sign-in this browser started: refused without the parent's sign-out on
            # `error`, so a link to /oidc/callback/?error=… cannot sign a person out.
            return self.login_failure()
        try:
            return super().get(request)
        except (SuspiciousOperation, SsoUnavailable, requests.RequestException, jwt.InvalidTokenError) as exc:
            logger.warning("SSO sign-in failed: %s", exc)
            return self.login_failure()
        except IntegrityError as exc:
            logger.warning("SSO sign-in raced another: %s", exc)
            return self.login_failure()

    def login_failure(self):
        reason = self.request.GET.get("error_description") or self.request.GET.get("error") or ""
        return _to_login(
            self.request,
            "Single sign-on did not sign you in" + (f" ({reason[:200]})" if reason else "") + ".",
        )


def urlpatterns() -> list:
    """The sign-on URLs, or none while SSO is off."""
    if not enabled():
        return []
    return [
        path("oidc/login/", SsoStart.as_view(), name="sso-start"),
        path("oidc/callback/", SsoCallback.as_view(), name="sso-callback"),
    ]
