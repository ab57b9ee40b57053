"""Web security of the dashboard: the Content-Security-Policy and the templates it relies on, production
settings (`check --deploy`), rate limits on sign-in and token creation, hostile strings rendered as text
on every page that shows them, CSRF on every dashboard POST, artifact uploads stored by digest and
downloads served inert, API tokens hashed, shown once, revocable, with their last use.

The browser half (no CSP violation in a real Chromium, charts drawn, htmx POST with its token) is
tests/browser/test_security_headers.py."""

from __future__ import annotations

import hashlib
import html
import io
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings as django_settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from smrweb import tasks
from smrweb.core import queue, ratelimits
from smrweb.core.downloads import content_disposition, safe_content_type, safe_filename
from smrweb.tracking import services
from smrweb.tracking.models import (
    ApiToken,
    Artifact,
    ArtifactBlob,
    KnowledgeKind,
    Submission,
    VerificationOutcome,
)
from smrweb.tracking.services import knowledge
from smrweb.tracking.services import submissions as lifecycle
from tests.factories import push

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[1]
PASSWORD = "pw-for-tests-only"  # tests.factories.UserFactory

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'
JS_URL = "javascript:alert(1)"
TEMPLATE = "{{ 7*7 }}"
RTL = "\u202egnp.exe"
HOSTILE = f"{SCRIPT}{IMG}{JS_URL}{TEMPLATE}{RTL}"  # 86 characters: fits every 200-character field
ESCAPED_SCRIPT = "&lt;script&gt;alert(1)&lt;/script&gt;"
ESCAPED_IMG = "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"


def n_of(rate: str) -> int:
    return int(rate.split("/")[0])


# --- the Content-Security-Policy and what it relies on -------------------------------------------------


def directives(response) -> dict[str, list[str]]:
    policy = response["Content-Security-Policy"]
    return {d.split()[0]: d.split()[1:] for d in (part.strip() for part in policy.split(";")) if d}


def test_pages_carry_the_policy_with_no_inline_or_eval_scripts(client_alice):
    for url in ["/", "/projects/hill/", "/login/", "/api/docs/"]:
        got = directives(client_alice.get(url))
        assert got["script-src"] == ["'self'"], url
        assert got["default-src"] == ["'self'"] and got["object-src"] == ["'none'"]
        assert got["frame-ancestors"] == ["'none'"] and got["base-uri"] == ["'self'"]
        assert got["form-action"] == ["'self'"] and got["connect-src"] == ["'self'"]
        assert got["img-src"] == ["'self'", "data:"]
        assert got["style-src"] == ["'self'", "'unsafe-inline'"]  # plotly styles; documented


def template_files() -> list[Path]:
    return sorted((ROOT / "templates").rglob("*.html")) + sorted(
        (ROOT / "smrweb").rglob("templates/**/*.html")
    )


INLINE_SCRIPT = re.compile(r"<script\b(?![^>]*\bsrc=)(?![^>]*type=\"application/json\")[^>]*>", re.IGNORECASE)
EVENT_HANDLER = re.compile(r"<[a-z][^>]*\son[a-z]+\s*=", re.IGNORECASE | re.DOTALL)


def test_no_template_has_an_inline_script_or_an_event_handler_attribute():
    assert template_files()
    for path in template_files():
        text = path.read_text()
        assert not INLINE_SCRIPT.search(text), f"{path}: inline <script> (move it to static/js/smrweb.js)"
        assert not EVENT_HANDLER.search(text), f"{path}: on*= handler attribute (use a data- attribute)"
        # htmx would have to eval these, and the page sets allowEval=false.
        for trigger in re.findall(r'hx-trigger="([^"]*)"', text):  # a [filter]; from:input[name=q] is CSS
            assert "[" not in re.sub(r"from:\S+", "", trigger), (
                f"{path}: hx-trigger filter {trigger!r} needs eval"
            )
        assert not re.search(r"hx-on[:-]|hx-vars=|=['\"]js:", text), f"{path}: htmx attribute that evals"


def test_the_checks_above_do_catch_inline_code():
    assert INLINE_SCRIPT.search("<script>alert(1)</script>")
    assert not INLINE_SCRIPT.search('<script src="/static/x.js" defer></script>')
    assert not INLINE_SCRIPT.search('<script id="f" type="application/json">{}</script>')
    assert EVENT_HANDLER.search('<button type="button"\n onclick="x()">')
    assert not EVENT_HANDLER.search('<button data-confirm="on=1">')


def test_base_page_configures_htmx_without_eval_and_sends_the_csrf_token(client_alice):
    body = client_alice.get("/").content.decode()
    config = re.search(r"<meta name=\"htmx-config\" content='([^']*)'>", body)
    # allowScriptTags stays on: off, htmx drops every <script> of a swapped fragment, the charts' JSON too.
    assert config and json.loads(config.group(1)) == {"allowEval": False, "includeIndicatorStyles": False}
    token = re.search(r"<body hx-headers='\{\"x-csrftoken\": \"([A-Za-z0-9]+)\"\}'>", body)
    assert token and len(token.group(1)) == 64
    # Every <script> on a rendered page loads a file or carries JSON data.
    for tag in re.findall(r"<script\b[^>]*>", body):
        assert "src=" in tag or 'type="application/json"' in tag, tag


def test_api_docs_serve_swagger_ui_start_up_code_as_a_script_of_its_own(client_alice):
    page = client_alice.get("/api/docs/")
    body = page.content.decode()
    assert page.status_code == 200
    assert not INLINE_SCRIPT.search(body)
    src = re.search(r'<script src="(/api/docs/\?[^"]*script=[^"]*)"', body)
    assert src, body
    script = client_alice.get(html.unescape(src.group(1)))
    assert script.status_code == 200 and script["Content-Type"].startswith("application/javascript")
    assert "SwaggerUIBundle(" in script.content.decode()
    assert "no-store" in script["Cache-Control"]  # it carries the CSRF token
    assert script["Cross-Origin-Resource-Policy"] == "same-origin"
    assert '"validatorUrl": null' in script.content.decode()  # no badge image from validator.swagger.io


def production_env(tmp_path, **extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SMRWEB_", "DATABASE_URL", "DEBUG"))}
    return {
        **env,
        "SMRWEB_PRODUCTION": "true",
        "ALLOWED_HOSTS": "smrweb.example.com",
        "SECRET_KEY": uuid.uuid4().hex + uuid.uuid4().hex,
        "SMRWEB_DATA_DIR": str(tmp_path),
        **extra,
    }


def test_production_settings_pass_check_deploy_with_secure_cookies_and_hsts(tmp_path):
    env = production_env(tmp_path)
    check = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    probe = (
        "from django.conf import settings as s; import json; print(json.dumps([s.SESSION_COOKIE_SECURE, "
        "s.CSRF_COOKIE_SECURE, s.SESSION_COOKIE_HTTPONLY, s.SECURE_HSTS_SECONDS, s.SECURE_SSL_REDIRECT, "
        "s.SECURE_PROXY_SSL_HEADER, s.CACHES['default']['BACKEND']]))"
    )
    shown = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", probe],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert json.loads(shown.stdout.strip().splitlines()[-1]) == [
        True,
        True,
        True,
        31536000,
        True,
        ["HTTP_X_FORWARDED_PROTO", "https"],
        "smrweb.core.rediscache.RedisCache",
    ]


def test_a_malformed_rate_setting_stops_start_up(tmp_path):
    env = production_env(tmp_path, SMRWEB_LOGIN_RATE="lots")
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0 and "SMRWEB_LOGIN_RATE must look like 10/m" in result.stderr


# --- rate limits -------------------------------------------------------------------------------------------


@pytest.fixture
def clock(time_machine):
    """django-ratelimit counts in fixed windows: hold the clock so that a test never straddles two."""
    time_machine.move_to("2026-03-02 10:00:05Z", tick=False)
    return time_machine


def sign_in(client, username, password="wrong", ip="10.0.0.1", url="/login/", **headers):
    return client.post(url, {"username": username, "password": password}, REMOTE_ADDR=ip, **headers)


def assert_locked_out(response):
    assert response.status_code == 429
    body = response.content.decode()
    assert "Too many attempts. Try again in" in body and "data-rate-limited" in body
    assert 0 < int(response["Retry-After"]) <= 24 * 3600
    assert "_auth_user_id" not in response.wsgi_request.session


def test_sign_in_is_limited_per_address_at_the_n_plus_first_attempt(client, alice, bob, clock):
    n = n_of(django_settings.SMRWEB_LOGIN_RATE)
    for i in range(n - 1):  # other usernames, so only the address's count grows
        assert sign_in(client, f"nobody-{i}").status_code == 200  # the usual form error
    assert sign_in(client, "alice", PASSWORD).status_code == 302  # the Nth is still checked
    client.logout()
    assert_locked_out(sign_in(client, "bob", PASSWORD))  # the N+1th is refused, right password or not
    assert sign_in(Client(), "bob", PASSWORD, ip="10.0.0.2").status_code == 302  # another address is not
    clock.shift(60)  # the next window
    assert sign_in(Client(), "bob", PASSWORD).status_code == 302


def test_a_stranger_cannot_lock_the_owner_out(client, alice, bob, clock):
    """Red-team finding 13: ten wrong passwords a minute for one username refused its owner too (429 with
    the right password, admin form too). Now the guesser's own client stops, the owner's does not."""
    n = n_of(django_settings.SMRWEB_LOGIN_RATE)
    for i in range(n):
        assert sign_in(Client(), "alice" if i % 2 else " ALICE", ip="10.1.0.1").status_code == 200
    assert_locked_out(sign_in(Client(), "alice", PASSWORD, ip="10.1.0.1"))  # the guesser's address: stopped
    assert sign_in(Client(), "alice", PASSWORD, ip="10.1.9.9").status_code == 302  # the owner: signed in
    assert sign_in(Client(), "alice", PASSWORD, ip="10.1.9.9", url="/admin/login/").status_code in (200, 302)


def test_guessing_one_account_from_many_addresses_gets_one_try_per_address(client, alice, bob, clock):
    many = n_of(django_settings.SMRWEB_LOGIN_USERNAME_RATE)
    for i in range(many):  # a botnet: one wrong guess from each address
        assert sign_in(Client(), "alice", ip=f"10.2.{i // 250}.{i % 250}").status_code == 200
    # The account is under attack now: an address that has failed on it may not try again ...
    assert_locked_out(sign_in(Client(), "alice", PASSWORD, ip="10.2.0.0"))
    # ... and a new address gets its one try, so the owner (who never failed) signs in.
    assert sign_in(Client(), "alice", PASSWORD, ip="10.3.0.1").status_code == 302
    assert (
        sign_in(Client(), "bob", PASSWORD, ip="10.2.0.0").status_code == 302
    )  # other accounts are not affected


def test_the_admin_sign_in_counts_against_the_same_limit(client, alice, clock):
    n = n_of(django_settings.SMRWEB_LOGIN_RATE)
    for i in range(n):
        assert sign_in(client, f"nobody-{i}", url="/admin/login/").status_code == 200
    assert_locked_out(sign_in(client, "alice", PASSWORD))
    assert_locked_out(sign_in(client, "alice", PASSWORD, url="/admin/login/"))


def test_behind_a_trusted_proxy_the_limit_keys_on_the_address_the_proxy_saw(client, alice, settings, clock):
    settings.SMRWEB_TRUSTED_PROXY_COUNT = 1
    n = n_of(settings.SMRWEB_LOGIN_RATE)
    for i in range(n):  # a client that forges entries in front still lands in its own bucket
        response = sign_in(
            client, f"nobody-{i}", ip="172.18.0.2", HTTP_X_FORWARDED_FOR=f"1.2.3.{i}, 203.0.113.7"
        )
        assert response.status_code == 200
    assert_locked_out(sign_in(client, "alice", PASSWORD, ip="172.18.0.2", HTTP_X_FORWARDED_FOR="203.0.113.7"))
    ok = sign_in(Client(), "alice", PASSWORD, ip="172.18.0.2", HTTP_X_FORWARDED_FOR="203.0.113.8")
    assert ok.status_code == 302  # same proxy, another client


def test_client_address_from_the_forwarded_chain(rf, settings):
    request = rf.get("/", REMOTE_ADDR="172.18.0.2", HTTP_X_FORWARDED_FOR="6.6.6.6, 198.51.100.1, 10.0.0.5")
    settings.SMRWEB_TRUSTED_PROXY_COUNT = 0
    assert ratelimits.client_ip(request) == "172.18.0.2"  # nothing trusted: the header is ignored
    settings.SMRWEB_TRUSTED_PROXY_COUNT = 2
    assert ratelimits.client_ip(request) == "198.51.100.1"
    settings.SMRWEB_TRUSTED_PROXY_COUNT = 5  # a shorter chain than promised: fall back to the peer
    assert ratelimits.client_ip(request) == "172.18.0.2"


def test_token_creation_is_limited_per_user_at_the_n_plus_first(
    client, alice, carol, project, other_project, clock
):
    n = n_of(django_settings.SMRWEB_TOKEN_CREATE_RATE)
    client.force_login(alice)
    for i in range(n):
        assert client.post("/projects/hill/tokens/", {"name": f"t{i}"}).status_code == 302
    refused = client.post("/projects/hill/tokens/", {"name": "one-too-many"})
    assert refused.status_code == 429 and 0 < int(refused["Retry-After"]) <= 3600
    assert "Too many attempts. Try again in" in refused.content.decode()
    assert not ApiToken.objects.filter(name="one-too-many").exists()
    assert ApiToken.objects.filter(project=project).count() == n
    other = Client()
    other.force_login(carol)  # another user is not affected
    assert other.post("/projects/other/tokens/", {"name": "theirs"}).status_code == 302


def redis_cache(prefix: str) -> dict:
    return {
        "default": {
            "BACKEND": "smrweb.core.rediscache.RedisCache",
            "LOCATION": django_settings.REDIS_URL,
            "KEY_PREFIX": prefix,
        }
    }


def test_counts_live_in_redis_so_every_web_process_shares_them(client, alice, settings, redis_server, clock):
    prefix = f"smrweb-test-{uuid.uuid4().hex}"
    settings.CACHES = redis_cache(prefix)
    try:
        n = n_of(settings.SMRWEB_LOGIN_RATE)
        for i in range(n):
            assert sign_in(client, f"nobody-{i}", ip="10.9.9.9").status_code == 200
        keys = redis_server.keys(f"{prefix}:*")
        assert keys  # visible to any other process on this Redis (another gunicorn worker)
        assert_locked_out(sign_in(client, "alice", PASSWORD, ip="10.9.9.9"))
    finally:
        for key in redis_server.keys(f"{prefix}:*"):
            redis_server.delete(key)


def test_an_unreachable_cache_lets_sign_in_through_and_says_so(client, alice, settings, caplog):
    settings.CACHES = {
        "default": {
            "BACKEND": "smrweb.core.rediscache.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }
    assert sign_in(client, "alice", PASSWORD).status_code == 302
    assert "rate limit login could not be counted" in caplog.text


# --- hostile strings
# -----------------------------------------------------------------------------------------


@pytest.fixture
def hostile(project, alice, bob):
    """Hostile text everywhere people and agents write: project name, actors, tool-call arguments, metric
    keys, messages, checkpoints, experiment names, failure details, artifact paths, validator output,
    review comments, knowledge entries, token names; a scenario whose arena URL is `javascript:`."""
    project.name = HOSTILE
    project.save()
    artifact, _ = services.store_artifact(project, "r1", path=f"../../{HOSTILE}", content=io.BytesIO(b"x"))
    push(
        project,
        "r1",
        {"type": "state", "state": "running"},
        {
            "type": "agent.turn",
            "turn": 0,
            "actor": HOSTILE,
            "model": HOSTILE,
            "tool_calls": [HOSTILE, {"name": HOSTILE, "args": {"path": HOSTILE}}],
        },
        {"type": "agent.turn", "turn": 0, "actor": "child", "parent_actor": HOSTILE},
        {"type": "metric", "key": HOSTILE, "step": 0, "value": 1.0},
        {"type": "message", "topic": HOSTILE, "target": HOSTILE, "body": HOSTILE},
        {"type": "checkpoint", "id": "c1", "label": HOSTILE, "restorable": False, "failure_reason": HOSTILE},
        {
            "type": "score",
            "score": 0.5,
            "artifact": artifact.blob.sha256,
            "experiment": HOSTILE,
            "commit": "abc",
        },
    )
    waiting, _ = services.store_artifact(project, "r2", path=f"sub/{HOSTILE}", content=io.BytesIO(b"y"))
    push(
        project,
        "r2",
        {"type": "state", "state": "failed", "failure": {"family": HOSTILE, "detail": HOSTILE}},
        {"type": "score", "score": 0.4, "artifact": waiting.blob.sha256},
    )  # a candidate in the review queue
    services.update_run_settings(project, "r1", git_branch=HOSTILE, requested_profile=HOSTILE)
    sub = Submission.objects.get(run__external_id="r1")
    lifecycle.request_verification(sub, by=bob)
    lifecycle.record_verification(
        sub.pk, lifecycle.VerificationResult(VerificationOutcome.PASSED, 0, HOSTILE, HOSTILE)
    )
    sub.refresh_from_db()
    lifecycle.review(sub, by=bob, verdict="approve", comment=HOSTILE)
    # What people write on runs: a display name, a tag, a note (Markdown), comments (one @mentions alice).
    services.update_run_labels(sub.run, by=bob, display_name=HOSTILE, pinned=True)
    services.set_tag(sub.run, key="hostile", value=HOSTILE, by=bob)
    services.save_note(sub.run, by=bob, body=f"{HOSTILE}\n\n[x]({JS_URL}) **b** <{JS_URL}>")
    services.add_comment(run=sub.run, by=bob, body=f"@alice {HOSTILE} [x]({JS_URL})")
    services.add_comment(submission=sub, by=bob, body=HOSTILE)
    entry = knowledge.add_entry(
        project, by=bob, kind=KnowledgeKind.FAILED_APPROACH, title=HOSTILE, body=HOSTILE
    )
    services.create_api_token(project, name=HOSTILE, by=alice)
    scenario = project.scenario
    scenario.name, scenario.description, scenario.arena_name = HOSTILE, HOSTILE, HOSTILE
    scenario.score_metric = HOSTILE
    scenario.arena_url = JS_URL
    scenario.save()
    turn = sub.run.turns.get(actor=HOSTILE)
    return {"sub": sub, "entry": entry, "turn": turn, "scenario": scenario}


def hostile_pages(h) -> dict[str, str]:
    """Each page that shows supplied text, and what on it is hostile."""
    sub, entry, turn = h["sub"], h["entry"], h["turn"]
    return {
        "/": "project name",
        "/projects/hill/": "project name, failure, leaderboard, display name, tags",
        "/projects/hill/runs/r1/": "actors, tool calls, metric key, messages, checkpoints, experiments, "
        "artifacts, display name, tags, note, comments",
        "/projects/hill/runs/r2/": "failure detail",
        f"/projects/hill/runs/r1/turns/{turn.pk}/": "tool-call arguments",
        "/projects/hill/runs/r1/metrics/?key=" + quote(HOSTILE, safe=""): "metric key",
        f"/projects/hill/submissions/{sub.pk}/": "validator output, review comment, artifact path",
        f"/projects/hill/submissions/{sub.pk}/comments/": "comments",
        "/projects/hill/runs/r1/comments/": "comments",
        "/inbox/": "a mention's comment",
        "/projects/hill/review/": "artifact path, experiment",
        "/projects/hill/compare/?runs=r1&runs=r2": "project name",
        "/projects/hill/knowledge/": "knowledge entry",
        f"/projects/hill/knowledge/{entry.pk}/edit": "knowledge entry",
        "/projects/hill/settings/": "project name",
        "/projects/hill/tokens/": "token name",
        f"/scenarios/{h['scenario'].key}/": "scenario name, description, arena",
    }


def test_hostile_strings_are_text_on_every_page_that_shows_them(client_alice, hostile):
    seen = {}
    for url, what in hostile_pages(hostile).items():
        response = client_alice.get(url)
        assert response.status_code == 200, url
        body = response.content.decode()
        assert "<script>alert(1)" not in body, f"{url} ({what}): raw script"
        assert "<img src=x" not in body, f"{url} ({what}): raw img"
        assert not re.search(r"""href\s*=\s*["']?\s*javascript:""", body, re.IGNORECASE), (
            f"{url}: javascript: link"
        )
        seen[url] = ESCAPED_SCRIPT in body or "\\u003Cscript\\u003E" in body
        if ESCAPED_SCRIPT in body:
            assert ESCAPED_IMG in body or "&quot;&gt;&lt;img" in body, url
    assert all(seen.values()), (
        f"hostile text missing (so untested) on: {[u for u, s in seen.items() if not s]}"
    )


def test_template_syntax_in_data_is_shown_not_evaluated(client_alice, hostile):
    body = client_alice.get("/projects/hill/knowledge/").content.decode()
    assert TEMPLATE in body  # "{{ 7*7 }}" literally
    assert RTL in body  # the override character stays text inside its element


def test_a_javascript_arena_url_never_becomes_a_link(client_alice, hostile):
    for url in [
        f"/scenarios/{hostile['scenario'].key}/",
        "/projects/hill/",
        f"/projects/hill/submissions/{hostile['sub'].pk}/",
    ]:
        body = client_alice.get(url).content.decode()
        assert "javascript:alert(1)" not in re.findall(r'href="([^"]*)"', body)
        assert not re.search(r'href="\s*javascript:', body, re.IGNORECASE)
    body = client_alice.get(f"/scenarios/{hostile['scenario'].key}/").content.decode()
    assert "(not an http(s) address: no link)" in body


def test_a_good_arena_url_is_still_a_link(client_alice, project):
    project.scenario.arena_url = "https://arena.example/board?x=1&y=2"
    project.scenario.save()
    body = client_alice.get(f"/scenarios/{project.scenario.key}/").content.decode()
    assert 'href="https://arena.example/board?x=1&amp;y=2"' in body


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        " JavaScript:alert(1)",
        "data:text/html,<b>x</b>",
        "vbscript:x",
        "//evil.example/",
        "/relative",
        "https:no-host",
        "http://a\nb/",
    ],
)
def test_only_absolute_http_urls_pass_the_href_filter(url):
    from smrweb.dashboard.templatetags.smrweb import http_url

    assert http_url(url) == ""
    assert http_url("https://arena.example/x") == "https://arena.example/x"


def test_hostile_run_ids_never_reach_a_page(api, client_alice):
    for run_id in ["<script>alert(1)</script>", '"><img src=x>', "{{7*7}}", "a\u202eb"]:
        response = api.post(
            f"/api/v1/projects/hill/runs/{run_id}/events",
            [{"type": "metric", "key": "k", "value": 1}],
            format="json",
        )
        assert response.status_code in (400, 404), run_id
    assert not client_alice.get("/projects/hill/").content.decode().count("<script>alert")


def drawn_text(node) -> list[str]:
    """Every string plotly draws as (pseudo-HTML) text: names, titles, hover templates, tick labels."""
    if isinstance(node, dict):
        return [
            t
            for k, v in node.items()
            for t in (
                [v]
                if k in ("name", "text", "hovertemplate", "ticktext") and isinstance(v, str)
                else drawn_text(v)
            )
        ]
    if isinstance(node, list):
        return [t for v in node for t in drawn_text(v)]
    return []


@pytest.mark.parametrize(
    "url", ["/projects/hill/runs/r1/", "/projects/hill/", "/projects/hill/compare/?runs=r1&runs=r2"]
)
def test_plotly_figures_carry_supplied_names_escaped(client_alice, hostile, url):
    body = client_alice.get(url).content.decode()
    figures = re.findall(r'<script id="[^"]+" type="application/json">(.*?)</script>', body, re.DOTALL)
    assert figures and all("<" not in f for f in figures)  # json_script escapes < for the HTML parser
    texts = drawn_text([json.loads(f) for f in figures])
    assert any("&lt;script&gt;" in t for t in texts)  # metric key / score metric, as entities for plotly
    assert not [t for t in texts if "<script" in t or "<img" in t]


# --- CSRF
# ------------------------------------------------------------------------------------------------------

# Every form that POSTs, by template (grepped: method="post" and hx-post); a new one must be added here.
POST_FORMS = {
    "base.html": 1,  # sign out
    "registration/login.html": 1,
    # settings, SMR source (test / new key), score metric, turn bodies (capture; delete the stored ones),
    # the spend guards (save, or preview their dry run)
    "dashboard/project_settings.html": 6,
    # per member: role, remove; per invitation: resend, revoke; invite; add an existing account
    "dashboard/project_members.html": 6,
    "registration/invitation.html": 2,  # accept (signed in) or join with a new account
    "registration/password_reset_form.html": 1,
    "registration/password_reset_confirm.html": 1,
    "dashboard/run_detail.html": 3,  # stop, snooze/unsnooze alerts, exclude/include the run
    "dashboard/project_alerts.html": 4,  # per rule: send a test, mute/unmute, delete; add a rule
    "dashboard/inbox.html": 3,  # mark all read, mark what the filter shows, mark a group read
    "dashboard/partials/inbox_item.html": 1,  # mark one read
    "dashboard/partials/rollback_form.html": 1,
    "dashboard/knowledge.html": 1,
    "dashboard/knowledge_edit.html": 1,
    # verify, review (approve/reject), upload, record, exclude, include
    "dashboard/submission_detail.html": 7,
    "dashboard/scenario_detail.html": 1,  # preflight (hx-post on the same form)
    "dashboard/project_tokens.html": 2,  # revoke, create
    "registration/password_change_form.html": 1,
    "dashboard/preferences.html": 1,  # the clock
    "dashboard/partials/run_tags.html": 4,  # remove a tag, add one, the display name, pin/unpin
    "dashboard/partials/run_notes.html": 1,  # the note (hx-post on the same form)
    # per comment: edit (hx-post on the same form), delete; a new one (on a run or on a submission)
    "dashboard/partials/comments.html": 4,
    "dashboard/launch_new.html": 1,  # start the next run
    # the review queue's panel: its review form, with approve and reject as hx-post buttons
    "dashboard/partials/review_panel.html": 3,
    "dashboard/review_queue.html": 1,  # bulk verify / approve of the selected rows
    "dashboard/partials/run_close.html": 1,  # close a silent run as abandoned
    "dashboard/partials/run_steer.html": 2,  # pause/resume; a runtime message (both also hx-post)
    "dashboard/confirm_delete.html": 1,  # delete a run or a project (typed confirmation)
    "dashboard/partials/run_archive.html": 1,  # archive / restore a finished run
    "dashboard/project_retention.html": 2,  # the retention policy; archive / restore the project
    "dashboard/partials/saved_views.html": 2,  # per view: delete; save the table as a view
    "dashboard/partials/share_box.html": 2,  # share a project's page or a leaderboard (hx-post too)
    "dashboard/partials/share_links.html": 1,  # per share link: revoke
}


def test_the_list_of_post_forms_is_complete():
    found = {}
    for path in template_files():
        count = len(re.findall(r'<form\b[^>]*method="post"', path.read_text(), re.IGNORECASE | re.DOTALL))
        hx_only = len(
            re.findall(r"<(?!form)[a-z]+\b[^>]*hx-post=", path.read_text(), re.IGNORECASE | re.DOTALL)
        )
        if count or hx_only:
            found[str(path.relative_to(ROOT / "templates"))] = count + hx_only
    assert found == POST_FORMS


@pytest.fixture
def post_targets(project, alice, bob, monkeypatch):
    """Every dashboard POST endpoint with a body that the view accepts (side effects stubbed)."""
    monkeypatch.setattr(queue, "dispatch", lambda task, *args: True)
    monkeypatch.setattr(tasks, "request_preflight", lambda key: "0" * 32)  # queued, never run
    push(
        project,
        "r1",
        {"type": "state", "state": "running"},
        {"type": "score", "score": 0.5},
        {"type": "checkpoint", "id": "c1", "label": "c1"},
    )
    sub = Submission.objects.get()
    verified = Submission.objects.get(pk=lifecycle.request_verification(sub, by=bob).pk)
    lifecycle.record_verification(
        verified.pk, lifecycle.VerificationResult(VerificationOutcome.PASSED, 0, "", "ok")
    )
    entry = knowledge.add_entry(project, by=bob, kind=KnowledgeKind.FAILED_APPROACH, title="t")
    token, _ = services.create_api_token(project, name="old")
    checkpoint = sub.run.checkpoints.get()
    s = f"/projects/hill/submissions/{sub.pk}/"
    rule = services.create_alert_rule(
        project, by=alice, trigger="run.failed", channel="inbox", recipient="alice"
    )
    alerts = f"/projects/hill/alerts/{rule.pk}/"
    comment = services.add_comment(run=sub.run, by=alice, body="mine")
    services.update_project(project, rollback_webhook_url="https://hooks.example/hill")  # it may start runs
    shared, _ = services.create_share_link(by=alice, kind="tree", days=1, project=project)
    return [
        ("/projects/hill/shares/", {"kind": "tree", "query": "state=running", "expires": "7"}),
        (f"/scenarios/{project.scenario.key}/share", {"kind": "leaderboard", "expires": "1"}),
        (f"/shares/{shared.pk}/revoke", {}),
        (
            "/projects/hill/launches/new",
            {"idempotency_key": "csrf-launch-key-1", "from_run": "r1", "text": "go"},
        ),
        (s + "queue-review/approve", {"comment": "from the queue"}),
        ("/projects/hill/review/bulk", {"action": "verify", "ids": [sub.pk]}),
        ("/projects/hill/runs/r1/steer", {"kind": "message", "body": "try a smaller lr"}),
        ("/projects/hill/runs/r1/close", {"reason": "the harness died"}),
        ("/projects/hill/runs/r1/labels", {"display_name": "named", "pinned": "1"}),
        ("/projects/hill/runs/r1/tags", {"tag": "model=x"}),
        ("/projects/hill/runs/r1/note", {"body": "a note"}),
        ("/projects/hill/runs/r1/comments/", {"body": "a comment"}),
        (s + "comments/", {"body": "a comment"}),
        (f"/projects/hill/comments/{comment.pk}", {"action": "edit", "body": "edited"}),
        ("/projects/hill/alerts/", {"trigger": "run.stalled", "channel": "inbox", "recipient": "alice"}),
        (alerts + "mute", {"muted": "1"}),
        (alerts + "test", {}),
        ("/inbox/read", {"all": "1"}),
        (alerts + "delete", {}),
        ("/projects/hill/runs/r1/snooze", {"action": "snooze", "hours": "2"}),
        ("/projects/hill/settings/", {"regression_threshold": "0.5", "rollback_webhook_url": ""}),
        ("/projects/hill/settings/", {"action": "turn_bodies", "capture_turn_bodies": "on"}),
        ("/projects/hill/members/", {"username": "bob", "role": "viewer"}),
        ("/projects/hill/invitations/", {"email": "csrf@example.org", "role": "viewer"}),
        ("/password/reset/", {"email": "alice@example.com"}),
        ("/projects/hill/runs/r1/stop", {}),
        ("/projects/hill/runs/r1/rollback", {"checkpoint": checkpoint.pk, "reason": "back"}),
        ("/projects/hill/knowledge/", {"kind": KnowledgeKind.FAILED_APPROACH, "title": "new", "body": ""}),
        (
            f"/projects/hill/knowledge/{entry.pk}/edit",
            {"kind": KnowledgeKind.FAILED_APPROACH, "title": "t2", "body": ""},
        ),
        (s + "approve", {"comment": "fine"}),
        (s + "upload", {}),
        (s + "record", {"rank": "3", "arena_score": "1.5", "note": ""}),
        (s + "verify", {}),
        (f"/scenarios/{project.scenario.key}/preflight", {}),
        (f"/projects/hill/tokens/{token.pk}/revoke", {}),
        ("/projects/hill/tokens/", {"name": "new"}),
        ("/password/", {"old_password": "x", "new_password1": "y", "new_password2": "y"}),  # form errors: 200
        ("/preferences/", {"clock": "local", "local_zone": "Europe/Paris"}),
        ("/logout/", {}),
    ]


def test_every_dashboard_post_is_refused_without_the_csrf_token_and_works_with_it(alice, post_targets):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    client.get("/")  # sets the CSRF cookie, as any page does
    secret = client.cookies["csrftoken"].value
    for url, data in post_targets:
        refused = client.post(url, data)
        assert refused.status_code == 403, url
        assert "CSRF" in refused.content.decode() or "Forbidden" in refused.content.decode(), url
    for url, data in post_targets:
        accepted = client.post(url, {**data, "csrfmiddlewaretoken": secret})
        assert accepted.status_code in (200, 302), (url, accepted.status_code)
    assert ApiToken.objects.filter(name="new").exists()  # the writes did happen


def test_htmx_posts_send_the_token_in_a_header_as_base_html_configures(alice, post_targets):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    page = client.get("/").content.decode()
    token = re.search(r'"x-csrftoken": "([A-Za-z0-9]+)"', page).group(1)
    url = f"/scenarios/{alice.projects.get().scenario.key}/preflight"
    assert client.post(url, headers={"HX-Request": "true"}).status_code == 403
    response = client.post(url, headers={"HX-Request": "true", "X-CSRFToken": token})
    assert response.status_code == 200 and 'id="preflight-report"' in response.content.decode()


def test_sign_in_needs_the_csrf_token_too(alice):
    client = Client(enforce_csrf_checks=True)
    assert sign_in(client, "alice", PASSWORD).status_code == 403
    client.get("/login/")
    response = client.post(
        "/login/",
        {"username": "alice", "password": PASSWORD, "csrfmiddlewaretoken": client.cookies["csrftoken"].value},
    )
    assert response.status_code == 302


# --- uploads and downloads
# ----------------------------------------------------------------------------------------


def upload(api, path=None, name="f.bin", data=b"payload", content_type="application/octet-stream"):
    fields = {"file": SimpleUploadedFile(name, data, content_type=content_type)}
    if path is not None:
        fields["path"] = path
    return api.post("/api/v1/projects/hill/runs/r1/artifacts", fields, format="multipart")


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("../../etc/passwd", "f.bin"),
        ("/etc/passwd", "f.bin"),
        (None, "../../../tmp/evil.sh"),
        (f"a/{HOSTILE}", "f.bin"),
    ],
)
def test_uploads_are_stored_by_digest_and_the_path_is_only_metadata(api, artifact_root, tmp_path, path, name):
    data = f"bytes for {path}{name}".encode()
    before = set(tmp_path.parent.rglob("*"))
    response = upload(api, path=path, name=name, data=data)
    assert response.status_code == 201, response.content
    sha = hashlib.sha256(data).hexdigest()
    [stored] = [p for p in artifact_root.rglob("*") if p.is_file()]
    rel = stored.relative_to(artifact_root).as_posix()
    assert re.fullmatch(rf"blobs/{sha[:2]}/{sha[2:4]}/{sha}(-[A-Za-z0-9_]+)?", rel), rel
    created = {p for p in set(tmp_path.parent.rglob("*")) - before if p.is_file()}
    assert created == {stored}  # nothing written anywhere else
    assert Artifact.objects.get().path == (path if path is not None else Path(name).name)


def test_a_path_with_backslashes_is_refused_and_nothing_is_stored(api, artifact_root):
    """Red-team N10: `..\\..\\boot.ini` was stored as a path a Windows client would join; now refused."""
    response = upload(api, path="..\\..\\boot.ini", name="f.bin", data=b"x")
    assert response.status_code == 400 and "backslash" in response.content.decode().lower()
    assert not Artifact.objects.exists() and not [p for p in artifact_root.rglob("*") if p.is_file()]


def test_uploads_over_the_size_cap_are_refused_and_nothing_is_stored(api, artifact_root, settings):
    settings.SMRWEB_MAX_ARTIFACT_BYTES = 1000
    assert upload(api, data=b"x" * 1000).status_code == 201
    response = upload(api, data=b"y" * 1001)
    assert response.status_code == 413 and response.json()["code"] == "artifact_too_large"
    assert (
        ArtifactBlob.objects.count() == 1 and len([p for p in artifact_root.rglob("*") if p.is_file()]) == 1
    )


@pytest.mark.parametrize(
    ("declared", "served"),
    [
        ("text/html", "application/octet-stream"),
        ("text/html; charset=utf-8", "application/octet-stream"),
        ("image/svg+xml", "application/octet-stream"),
        ("application/javascript", "application/octet-stream"),
        ("text/javascript", "application/octet-stream"),
        ("application/xhtml+xml", "application/octet-stream"),
        ("application/pdf", "application/octet-stream"),
        ("text/xml", "application/octet-stream"),
        ("multipart/x-mixed-replace; boundary=x", "application/octet-stream"),
        ("nonsense", "application/octet-stream"),
        ("TEXT/PLAIN", "text/plain"),
        ("text/plain; charset=utf-8", "text/plain; charset=utf-8"),
        ('text/plain; charset="utf-8"; x=<script>', "text/plain; charset=utf-8"),
        ("text/plain; charset=<script>", "text/plain"),
        ("application/json", "application/json"),
        ("image/png", "image/png"),
        ("image/png; charset=utf-8", "image/png"),
        ("text/x-python", "text/x-python"),
        ("application/zip", "application/zip"),
    ],
)
def test_downloads_are_served_with_a_safelisted_type_or_octet_stream(declared, served):
    assert safe_content_type(declared) == served


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("out/solution.py", "solution.py"),
        ("../../etc/passwd", "passwd"),
        ("C:\\Users\\x\\evil.bat", "evil.bat"),
        ("a/b/", "artifact"),
        ("..", "artifact"),
        ("dir/...", "artifact"),
        ("x/.bashrc", "bashrc"),
        ("report\r\nSet-Cookie: a=b.txt", "reportSet-Cookie: a=b.txt"),
        (f"x/{RTL}", "gnp.exe"),
        ("x/in\u200bvisible\u2028name.txt", "invisible name.txt"),
        ("x/tab\there.txt", "tabhere.txt"),
    ],
)
def test_download_filenames_are_the_last_segment_without_control_or_bidi_characters(path, name):
    assert safe_filename(path) == name


def test_long_download_filenames_are_cut_keeping_the_extension():
    name = safe_filename("d/" + "a" * 400 + ".tar.gz")
    assert len(name) <= 150 and name.endswith(".gz") and name.startswith("aaa")


def test_content_disposition_quotes_ascii_and_adds_rfc5987_for_the_rest():
    assert content_disposition("solution.py") == 'attachment; filename="solution.py"'
    assert (
        content_disposition('a"b\\c.txt')
        == "attachment; filename=\"a'b_c.txt\"; filename*=UTF-8''a%22b%5Cc.txt"
    )
    assert content_disposition("résumé.txt") == (
        "attachment; filename=\"r_sum_.txt\"; filename*=UTF-8''r%C3%A9sum%C3%A9.txt"
    )


def test_a_hostile_artifact_downloads_as_an_inert_attachment(client_alice, project):
    artifact, _ = services.store_artifact(
        project,
        "r1",
        path=f"x/{RTL}\r\nX-Evil: 1<script>.html",
        content=io.BytesIO(b"<script>alert(1)</script>"),
        content_type="text/html",
    )
    response = client_alice.get(f"/projects/hill/runs/r1/artifacts/{artifact.pk}/download")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/octet-stream"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Content-Security-Policy"] == "default-src 'none'; sandbox"
    disposition = response["Content-Disposition"]
    assert (
        disposition.startswith('attachment; filename="')
        and "\r" not in disposition
        and "\n" not in disposition
    )
    assert "\u202e" not in disposition and "%E2%80%AE" not in disposition
    assert "X-Evil" not in response.headers
    assert b"".join(response.streaming_content) == b"<script>alert(1)</script>"  # the exact bytes, inert


def test_the_api_and_signed_link_downloads_are_inert_too(api, client, project):
    artifact, _ = services.store_artifact(
        project, "r1", path="page.svg", content=io.BytesIO(b"<svg onload=x>"), content_type="image/svg+xml"
    )
    from smrweb.dashboard.artifacts import signed_artifact_path

    for response in (
        api.get(f"/api/v1/projects/hill/runs/r1/artifacts/{artifact.pk}/download"),
        client.get(signed_artifact_path(artifact)),
    ):
        assert response.status_code == 200
        assert response["Content-Type"] == "application/octet-stream"
        assert response["Content-Disposition"] == 'attachment; filename="page.svg"'
        assert response["X-Content-Type-Options"] == "nosniff"


# --- API tokens
# -------------------------------------------------------------------------------------------------


def test_a_token_is_hashed_at_rest_shown_once_revocable_and_records_its_last_use(
    client_alice, project, anon_api
):
    created = client_alice.post("/projects/hill/tokens/", {"name": "harness"}, follow=True)
    body = created.content.decode()
    raw = re.search(r'<pre class="token" id="new-token">(smr_[A-Za-z0-9_-]+)</pre>', body).group(1)
    assert f'data-copy="{raw}"' in body and "onclick" not in body  # copied by smrweb.js, not inline code
    token = ApiToken.objects.get(name="harness")
    assert token.token_hash == hashlib.sha256(raw.encode()).hexdigest()
    stored = [str(v) for v in ApiToken.objects.filter(pk=token.pk).values().get().values()]
    assert not any(raw in v for v in stored) and raw.startswith(token.hint) and len(token.hint) < 16
    again = client_alice.get("/projects/hill/tokens/").content.decode()
    assert raw not in again and token.hint in again  # shown once; afterwards only its first characters
    assert token.last_used_at is None and "never" in again.split('data-token="harness"')[1].split("</tr>")[0]

    anon_api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert anon_api.get("/api/v1/projects/hill/runs").status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None
    row = (
        client_alice.get("/projects/hill/tokens/")
        .content.decode()
        .split('data-token="harness"')[1]
        .split("</tr>")[0]
    )
    assert "never" not in row and re.search(r">\d+s ago<", row)

    client_alice.post(f"/projects/hill/tokens/{token.pk}/revoke")
    assert anon_api.get("/api/v1/projects/hill/runs").status_code == 401
