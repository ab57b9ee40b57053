"""A real OpenID Connect provider for the SSO tests: django-oauth-toolkit in its own process (serve.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Provider:
    issuer: str
    client_id: str
    client_secret: str


@contextmanager
def running_provider(
    redirect_uris: list[str], users: list[dict], *, skip_authorization: bool = False, timeout: float = 60.0
) -> Iterator[Provider]:
    """Start the provider, wait until its discovery document answers, stop it (and its files) afterwards."""
    with tempfile.TemporaryDirectory(prefix="oidc-provider-") as tmp:
        config = {
            "db": str(Path(tmp) / "provider.sqlite3"),
            "client_id": "smrweb-test-client",
            "client_secret": "smrweb-test-secret-" + os.urandom(8).hex(),
            "redirect_uris": redirect_uris,
            "skip_authorization": skip_authorization,
            "users": users,
        }
        (Path(tmp) / "config.json").write_text(json.dumps(config))
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "SMRWEB_", "DATABASE_URL"))
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.oidc_provider.serve", str(Path(tmp) / "config.json")],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            line = proc.stdout.readline()  # blocks until it serves (or dies)
            if not line.startswith("PORT "):
                raise RuntimeError(f"the OIDC provider did not start (exit {proc.wait(timeout)})")
            issuer = f"http://127.0.0.1:{int(line.split()[1])}/o"
            requests.get(f"{issuer}/.well-known/openid-configuration", timeout=timeout).raise_for_status()
            yield Provider(issuer, config["client_id"], config["client_secret"])
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def reload_urls() -> None:
    """smrweb/urls.py adds the sign-on URLs at import: import it again after the settings change."""
    import importlib

    from django.urls import clear_url_caches

    import smrweb.urls

    importlib.reload(smrweb.urls)
    clear_url_caches()


@contextmanager
def sso_enabled(settings, issuer: str, client_id: str, client_secret: str, **extra) -> Iterator[None]:
    """Single sign-on on for the test (as SMRWEB_OIDC_* in the environment would make it), then off."""
    from smrweb.dashboard import sso

    settings.SMRWEB_OIDC_ISSUER = issuer
    settings.SMRWEB_OIDC_CLIENT_ID = client_id
    settings.SMRWEB_OIDC_CLIENT_SECRET = client_secret
    for name, value in extra.items():
        setattr(settings, name, value)
    settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS, "smrweb.dashboard.sso.Backend"]
    sso.forget_discovery()
    reload_urls()
    try:
        yield
    finally:
        settings.SMRWEB_OIDC_ISSUER = ""
        sso.forget_discovery()
        reload_urls()
