"""Signed artifact links (`/a/<token>/`): exact bytes and digest without a session, 410 once expired,
403 for anything altered or replayed against other bytes, never a 500; rendered on the run and
project pages."""

import base64
import hashlib
import io
import re
from datetime import timedelta

import pytest
import time_machine
from django.core import signing
from django.utils import timezone

from smrweb.core import signed_links
from smrweb.dashboard.artifacts import artifact_for_token, signed_artifact_path
from smrweb.tracking import services
from smrweb.tracking.models import Artifact
from tests.factories import push

pytestmark = pytest.mark.django_db

PAYLOAD = bytes(range(256)) * 4 + b"\x00tail\r\n"


def store(project, run_id="r1", path="submission/policy.onnx", content=PAYLOAD) -> Artifact:
    artifact, _ = services.store_artifact(project, run_id, path=path, content=io.BytesIO(content))
    return Artifact.objects.select_related("blob", "run").get(pk=artifact.pk)


def token_of(path: str) -> str:
    match = re.fullmatch(r"/a/([^/]+)/", path)
    assert match, path
    return match[1]


def parts(path: str) -> list[str]:
    return token_of(path).split(".")


def link(*token_parts: str) -> str:
    return f"/a/{'.'.join(token_parts)}/"


def assert_private(response) -> None:
    assert response["Cache-Control"] == "private, no-store"
    assert response["Referrer-Policy"] == "no-referrer"


# --- a valid link ----------------------------------------------------------------------------------


def test_a_valid_link_downloads_the_exact_bytes_with_the_digest_without_a_session(client, project):
    artifact = store(project)
    path = signed_artifact_path(artifact)
    assert re.fullmatch(r"/a/[1-9][0-9]*\.[0-9A-Za-z]+\.[A-Za-z0-9_-]{43}/", path)
    assert len(path) < 80  # compact enough to paste anywhere

    response = client.get(path)  # `client` has no session
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == PAYLOAD
    digest = hashlib.sha256(PAYLOAD).digest()
    assert response["X-Content-SHA256"] == digest.hex()
    assert response["Repr-Digest"] == f"sha-256=:{base64.b64encode(digest).decode()}:"
    assert response["Content-Length"] == str(len(PAYLOAD))
    assert response["Content-Disposition"] == 'attachment; filename="policy.onnx"'
    assert_private(response)
    assert "sessionid" not in response.cookies


def test_head_answers_the_headers_without_the_body(client, project):
    response = client.head(signed_artifact_path(store(project)))
    assert response.status_code == 200
    assert response["X-Content-SHA256"] == hashlib.sha256(PAYLOAD).hexdigest()
    assert response["Content-Length"] == str(len(PAYLOAD))
    assert b"".join(response.streaming_content) == b""
    assert_private(response)


def test_only_get_and_head_are_allowed(client, project):
    path = signed_artifact_path(store(project))
    assert client.post(path).status_code == 405
    assert client.delete(path).status_code == 405


def test_links_are_stable_within_a_step_and_each_verifies(project):
    artifact = store(project)
    with time_machine.travel(timezone.now().replace(minute=0, second=1), tick=False):
        first = signed_artifact_path(artifact)
        assert signed_artifact_path(artifact) == first  # a polled page does not churn its links
        assert artifact_for_token(token_of(first)) == artifact


# --- expiry --------------------------------------------------------------------------------------


def test_an_expired_link_is_refused_with_410_and_says_what_to_do(client, project):
    artifact = store(project)
    path = signed_artifact_path(artifact)
    with time_machine.travel(timezone.now() + timedelta(hours=23, minutes=59), tick=False):
        assert client.get(path).status_code == 200
    with time_machine.travel(timezone.now() + timedelta(hours=25, seconds=1), tick=False):
        response = client.get(path)
        assert response.status_code == 410
        body = response.content.decode()
        assert "expired" in body and "fresh link from the run page" in body
        assert 'class="card error-page"' in body
        assert_private(response)
        assert client.head(path).status_code == 410
        with pytest.raises(signed_links.ExpiredLink):
            artifact_for_token(token_of(path))


def test_the_lifetime_comes_from_the_setting_or_the_argument(client, project, settings):
    artifact = store(project)
    settings.SMRWEB_SIGNED_LINK_TTL_SECONDS = 120
    from_setting = signed_artifact_path(artifact)
    short = signed_artifact_path(artifact, ttl=timedelta(minutes=10))
    now = timezone.now()
    with time_machine.travel(now + timedelta(seconds=100), tick=False):
        assert client.get(from_setting).status_code == 200
    with time_machine.travel(now + timedelta(seconds=200), tick=False):
        assert client.get(from_setting).status_code == 410
        assert client.get(short).status_code == 200
    with time_machine.travel(now + timedelta(minutes=11), tick=False):
        assert client.get(short).status_code == 410
    with pytest.raises(ValueError):
        signed_artifact_path(artifact, ttl=timedelta(0))


# --- tampering and replay ----------------------------------------------------------------------------


def _flip(text: str, index: int) -> str:
    return text[:index] + ("A" if text[index] != "A" else "B") + text[index + 1 :]


def test_altered_links_are_refused_with_403(client, project):
    artifact = store(project)
    other = store(project, "r2", "submission/other.onnx", b"other bytes")
    path = signed_artifact_path(artifact)
    pk, expires, sig = parts(path)
    far_future = signing.b62_encode(int(timezone.now().timestamp()) + 10 * 365 * 86400)
    altered = {
        "flipped signature": link(pk, expires, _flip(sig, 10)),
        "flipped expiry": link(pk, _flip(expires, len(expires) - 1), sig),
        "longer expiry": link(pk, far_future, sig),
        "truncated": path[:-6] + "/",
        "signature dropped": link(pk, expires),
        "other artifact's id": link(str(other.pk), expires, sig),
    }
    for name, bad in altered.items():
        response = client.get(bad)
        assert response.status_code == 403, name
        assert "Link not valid" in response.content.decode(), name
        assert_private(response)
    with pytest.raises(signed_links.TamperedLink):
        artifact_for_token(".".join([str(other.pk), expires, sig]))
    # An altered link stays refused after the real one expired: tampering is never reported as expiry.
    with time_machine.travel(timezone.now() + timedelta(days=2), tick=False):
        assert client.get(altered["longer expiry"]).status_code == 403


def test_a_link_from_one_project_cannot_fetch_another_projects_artifact(client, project, other_project):
    ours = store(project)
    theirs = store(other_project, "secret-run", "submission/secret.onnx", b"the other team's bytes")
    _, expires, sig = parts(signed_artifact_path(ours))
    response = client.get(link(str(theirs.pk), expires, sig))
    assert response.status_code == 403
    assert b"the other team" not in response.content
    # And the other way round: their link names their artifact only.
    assert client.get(signed_artifact_path(theirs)).status_code == 200


def test_a_link_is_bound_to_the_bytes_and_the_project(client, project, other_project):
    artifact = store(project)
    path = signed_artifact_path(artifact)
    replacement = store(project, "r2", "submission/policy.onnx", b"newer bytes")
    assert client.get(path).status_code == 200
    Artifact.objects.filter(pk=artifact.pk).update(blob=replacement.blob)  # re-pointed at other bytes
    assert client.get(path).status_code == 403
    Artifact.objects.filter(pk=artifact.pk).update(
        blob=artifact.blob, run=store(other_project, "x", "elsewhere.bin").run
    )
    assert client.get(path).status_code == 403  # moved to another project


def test_a_link_to_a_deleted_artifact_is_refused(client, project):
    artifact = store(project)
    path = signed_artifact_path(artifact)
    services.delete_event_rows(Artifact.objects.filter(pk=artifact.pk))
    response = client.get(path)
    assert response.status_code == 403
    with pytest.raises(signed_links.TamperedLink):
        artifact_for_token(token_of(path))


def test_an_unknown_id_and_a_bad_signature_are_refused_alike(client, project):
    """Red-team finding 11: the refusal told "no longer exists" from "was altered" without signing in,
    so artifact ids could be enumerated. Now both answers are the same, byte for byte."""
    artifact = store(project)
    _, expires, sig = parts(signed_artifact_path(artifact))
    unknown = client.get(link(str(artifact.pk + 1000), expires, sig))
    tampered = client.get(link(str(artifact.pk), expires, sig[:-1] + ("A" if sig[-1] != "A" else "B")))
    assert unknown.status_code == tampered.status_code == 403

    def refusal(response) -> str:  # the page around it carries a fresh CSRF token each time
        return re.search(
            r'<section class="card error-page">.*?</section>', response.content.decode(), re.S
        ).group(0)

    assert refusal(unknown) == refusal(tampered) and signed_links.NOT_VALID in refusal(unknown)


@pytest.mark.parametrize(
    "token",
    [
        "x",
        "1",
        "1.2.3",
        "..",
        "...",
        "0.1." + "A" * 43,
        "9" * 19 + ".1." + "A" * 43,
        "-1.1." + "A" * 43,
        "１２.1." + "A" * 43,
        "1.１." + "A" * 43,
        "é" * 200,
        "💥",
        "A" * 10_000,
        "1." + "z" * 5000 + "." + "A" * 43,
        "%00",
        "1.1.%00",
        "%FF%FE",
        "'; DROP TABLE x; --",
        "<script>alert(1)</script>",
        "1.1." + "A" * 43 + "%0a",
    ],
)
def test_garbage_tokens_are_refused_never_a_500(client, project, token):
    store(project)
    response = client.get(f"/a/{token}/")
    assert response.status_code in (400, 403, 404), response.status_code
    assert client.head(f"/a/{token}/").status_code in (400, 403, 404)


# --- pages --------------------------------------------------------------------------------------------


def test_the_run_page_offers_the_signed_link_and_the_digest(client_alice, client, project):
    artifact = store(project)
    push(project, "r1", {"type": "score", "score": 0.5, "artifact": artifact.blob.sha256})
    body = client_alice.get("/projects/hill/runs/r1/").content.decode()
    card = re.search(r'<div class="artifact-actions">(.*?)</div>', body, re.DOTALL)[1]
    assert f'href="/projects/hill/runs/r1/artifacts/{artifact.pk}/download"' in card
    signed = re.search(r'data-copy="(/a/[^"]+/)" data-copy-label="signed link" title="([^"]+)"', card)
    assert "works without signing in" in signed[2] and "24 hours" in signed[2]
    assert f'data-copy="{artifact.blob.sha256}" data-copy-label="sha256"' in card
    assert artifact_for_token(token_of(signed[1])) == artifact
    # The submissions table has the same two copy buttons for its row's artifact.
    row = re.search(r'<table class="submissions">.*?</table>', body, re.DOTALL)[0]
    assert f'data-copy="{signed[1]}" data-copy-label="signed link"' in row
    assert f'data-copy="{artifact.blob.sha256}" data-copy-label="sha256"' in row
    # The copied link works for someone with no session.
    assert client.get(signed[1]).status_code == 200


def test_the_leaderboard_offers_signed_links(client_alice, project):
    artifact = store(project)
    push(project, "r1", {"type": "score", "score": 0.5, "artifact": artifact.blob.sha256})
    body = client_alice.get("/projects/hill/?unverified=1").content.decode()
    board = re.search(r'<table class="leaderboard.*?</table>', body, re.DOTALL)[0]
    signed = re.search(r'data-copy="(/a/[^"]+/)" data-copy-label="signed link"', board)
    assert artifact_for_token(token_of(signed[1])) == artifact
    assert f'data-copy="{artifact.blob.sha256}" data-copy-label="sha256"' in board


def test_signed_links_add_no_query_per_row(client_alice, project, django_assert_max_num_queries):
    def add(n):
        artifact = store(project, "r1", f"submission/v{n}.onnx", f"version {n}".encode())
        push(project, "r1", {"type": "score", "score": n / 10, "artifact": artifact.blob.sha256})

    add(0)
    with django_assert_max_num_queries(60) as run_small:
        client_alice.get("/projects/hill/runs/r1/")
    with django_assert_max_num_queries(60) as project_small:
        client_alice.get("/projects/hill/")
    for n in range(1, 6):
        add(n)
    with django_assert_max_num_queries(len(run_small.captured_queries)):
        client_alice.get("/projects/hill/runs/r1/")
    with django_assert_max_num_queries(len(project_small.captured_queries)):
        client_alice.get("/projects/hill/")
