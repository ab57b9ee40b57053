"""Bearer-token authentication: `Authorization: Bearer smr_…`, scoped to one project."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed

from smrweb.tracking import services
from smrweb.tracking.models import ApiToken


class TokenPrincipal:
    """What `request.user` is for a token request: authenticated, but no Django user and no staff rights."""

    is_authenticated = True
    is_anonymous = False
    is_superuser = False
    is_staff = False
    pk = None

    def __init__(self, token: ApiToken):
        self.token = token

    def get_username(self) -> str:
        return f"token:{self.token.name}"

    def __str__(self) -> str:
        return self.get_username()


class ApiTokenAuthentication(BaseAuthentication):
    keyword = b"bearer"

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword:
            return None
        if len(parts) != 2:
            raise AuthenticationFailed("Malformed Authorization header: expected 'Bearer <token>'.")
        try:
            raw = parts[1].decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Malformed token.") from None
        token = services.authenticate_token(raw)
        if token is None:
            raise AuthenticationFailed("Invalid or revoked token.")
        return TokenPrincipal(token), token

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="smrweb"'


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """Describes the bearer token in the OpenAPI document (registered by being defined)."""

    target_class = ApiTokenAuthentication
    name = "projectToken"

    def get_security_definition(self, auto_schema):
        return build_bearer_security_scheme_object(header_name="AUTHORIZATION", token_prefix="Bearer")
