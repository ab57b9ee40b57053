"""The claims the test provider tells: its users' profile and email, and the projects claim smrweb maps."""

import json
import os

from oauth2_provider.oauth2_validators import OAuth2Validator


class Validator(OAuth2Validator):
    oidc_claim_scope = None  # every claim below, whatever the scopes (the projects claim has no scope)

    def get_additional_claims(self, request):
        user = request.user
        extra = json.loads(os.environ.get("OIDC_PROVIDER_CLAIMS", "{}")).get(user.username, {})
        return {
            "preferred_username": user.username,
            "email": user.email,
            "email_verified": extra.get("email_verified", True),
            **{k: v for k, v in extra.items() if k != "email_verified"},
        }
