"""Run the test OIDC provider: `python -m tests.oidc_provider.serve CONFIG.json` (from the repository root).

CONFIG: {"db": path, "client_id", "client_secret", "redirect_uris": [..], "skip_authorization": bool,
"users": [{"username", "password", "email", "claims": {extra claims, e.g. email_verified, smrweb_projects}}]}.
Makes an RSA key, migrates a fresh SQLite database, creates the users and one confidential
authorization-code client (RS256), then serves on a free port of 127.0.0.1 with wsgiref (threads) and
prints "PORT <n>" once it accepts connections."""

import json
import os
import sys
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from jwcrypto import jwk


class Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class Handler(WSGIRequestHandler):
    def log_message(self, format, *args):  # one line per request on stderr, prefixed
        sys.stderr.write("oidc-provider: " + (format % args) + "\n")


def main(config_path: str) -> None:
    config = json.loads(open(config_path).read())
    key = jwk.JWK.generate(kty="RSA", size=2048)
    os.environ["OIDC_PROVIDER_RSA_KEY"] = key.export_to_pem(private_key=True, password=None).decode()
    os.environ["OIDC_PROVIDER_DB"] = config["db"]
    os.environ["OIDC_PROVIDER_CLAIMS"] = json.dumps(
        {u["username"]: u.get("claims", {}) for u in config["users"]}
    )
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.oidc_provider.settings"

    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.core.wsgi import get_wsgi_application
    from oauth2_provider.models import Application

    call_command("migrate", verbosity=0, interactive=False)
    for user in config["users"]:
        get_user_model().objects.create_user(
            user["username"], email=user.get("email", ""), password=user["password"]
        )
    Application.objects.create(
        name="smrweb",
        client_id=config["client_id"],
        client_secret=config["client_secret"],
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=" ".join(config["redirect_uris"]),
        algorithm=Application.RS256_ALGORITHM,
        skip_authorization=config.get("skip_authorization", False),
    )
    httpd = make_server("127.0.0.1", 0, get_wsgi_application(), server_class=Server, handler_class=Handler)
    print(f"PORT {httpd.server_port}", flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1])
