"""A submission's reproducibility bundle end to end (issue 39 item 4): verified in the real sandbox on the
optimizer preset, downloaded over the API, the page and the signed link (without an account), checked
against the published key, re-scored by `smrweb rescore` in the real sandbox; tampering refused; bad ids
answered with JSON 404s, never a 500."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
import time_machine
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from smrweb import cli
from smrweb.core import bundles
from smrweb.sources import bundles as server_bundles
from smrweb.sources import verification
from smrweb.tracking import services
from smrweb.tracking.models import Scenario, Submission
from smrweb.tracking.queries.runs import KICKOFF_TOPIC
from smrweb.tracking.services import submissions as lifecycle
from tests.factories import push

pytestmark = pytest.mark.django_db

GOOD = (
    b"class Optimizer:\n    def __init__(self, params, lr=1e-3):\n        self.params = list(params)\n\n"
    + (b"    def step(self):\n        pass\n")
)
BAD = b"def optimize(params):\n    return params\n"


@pytest.fixture
def hill(project):
    call_command("load_presets", stdout=io.StringIO())
    project.scenario = Scenario.objects.get(key="optimizer-hill-climb")
    project.save()
    return project


def scored(project, content: bytes, score: float, run: str = "r1") -> Submission:
    artifact, _ = services.store_artifact(
        project, run, path="submission/optimizer.py", content=io.BytesIO(content)
    )
    push(
        project,
        run,
        {"type": "message", "body": "Tune the optimizer's warm-up.", "topic": KICKOFF_TOPIC},
        {"type": "score", "score": score, "artifact": artifact.blob.sha256, "commit": "abc1234def"},
    )
    return Submission.objects.filter(project=project).order_by("-id").first()


def verified(sub: Submission, by) -> Submission:
    """Verified as the worker does: the scenario's validator on the artifact, in the real sandbox."""
    lifecycle.request_verification(sub, by=by)
    loaded = Submission.objects.select_related("project__scenario", "artifact__blob").get(pk=sub.pk)
    assert verification.confinement() is not None  # the tests run the real sandbox
    verification.verify(loaded, lambda line: None)
    return Submission.objects.get(pk=sub.pk)


def session(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def download(client, sub: Submission, tmp_path: Path, name: str = "bundle.tar.gz") -> Path:
    response = client.get(f"/api/v1/projects/{sub.project.slug}/submissions/{sub.pk}/bundle")
    assert response.status_code == 200, response.content[:500]
    body = b"".join(response.streaming_content)
    assert response["Content-Type"] == "application/gzip"
    assert response["Content-Disposition"] == f'attachment; filename="smrweb-bundle-hill-{sub.pk}.tar.gz"'
    assert response["X-Content-SHA256"] == hashlib.sha256(body).hexdigest()
    path = tmp_path / name
    path.write_bytes(body)
    return path


def key_file(tmp_path: Path) -> str:
    """The published key, fetched as a stranger would (no token, no session)."""
    response = APIClient().get("/api/v1/bundle-key")
    assert response.status_code == 200
    path = tmp_path / "bundle-key.json"
    path.write_text(json.dumps(response.json()))
    return str(path)


def rescore(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["rescore", *argv])
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


# --- the bundle -----------------------------------------------------------------------------------


def test_a_bundle_holds_everything_that_identifies_the_submission_and_verifies(hill, bob, tmp_path):
    sub = verified(scored(hill, GOOD, 0.5), bob)
    assert sub.verification_outcome == "passed" and "valid:" in sub.verification_output
    path = download(session(bob), sub, tmp_path)

    keys = bundles.load_public_keys(Path(key_file(tmp_path)).read_text())
    opened = bundles.open_bundle(path, keys, tmp_path / "out")
    m = opened.manifest
    assert opened.key_id == m["key_id"] == bundles.key_id(server_bundles.signing_key())
    assert m["claimed_score"] == 0.5 and m["commit"] == "abc1234def"
    assert m["project"] == {"id": hill.pk, "slug": "hill", "name": "Hill climb"}
    assert m["run"]["external_id"] == "r1" and m["run"]["id"] == sub.run_id
    assert m["submission"]["id"] == sub.pk and m["submission"]["created"] == sub.created.isoformat()
    assert m["scenario"]["key"] == "optimizer-hill-climb"
    assert m["scenario"]["version"]["updated"] == hill.scenario.updated.isoformat()
    assert re.fullmatch(r"[0-9a-f]{64}", m["scenario"]["version"]["definition_sha256"])
    assert m["validator"]["name"] == "optimizer_py.py"
    assert m["validator"]["command"] == hill.scenario.validator_command
    script = (verification.VALIDATORS_DIR / "optimizer_py.py").read_bytes()
    assert opened.file("validator/optimizer_py.py").read_bytes() == script
    assert m["files"]["validator/optimizer_py.py"]["sha256"] == hashlib.sha256(script).hexdigest()
    assert re.fullmatch(r"[0-9a-f]{64}", m["validator"]["digest"])
    assert m["verification"]["outcome"] == "passed" and m["verification"]["exit_code"] == 0
    assert opened.file("verification-output.txt").read_text() == sub.verification_output
    assert opened.file("kickoff.txt").read_text() == "Tune the optimizer's warm-up."
    assert m["kickoff"]["source"] == "kickoff message"
    assert set(m["model_profile"]) == {"requested", "actual", "launch", "actors"}
    assert opened.file("artifact/optimizer.py").read_bytes() == GOOD
    assert m["artifact"]["sha256"] == hashlib.sha256(GOOD).hexdigest()
    # Every file but the manifest and its signature is digested in the manifest.
    with tarfile.open(path, "r:gz") as tar:
        files = {m_.name.split("/", 1)[1] for m_ in tar.getmembers() if m_.isfile()}
    assert files - {"manifest.json", "manifest.json.sig"} == set(m["files"])

    # The same submission gives the same bytes (deterministic), whoever downloads it.
    again = download(session(bob), sub, tmp_path, "again.tar.gz")
    assert again.read_bytes() == path.read_bytes()


def test_a_valid_submission_is_rescored_in_the_real_sandbox_and_holds(hill, bob, tmp_path, capsys):
    sub = verified(scored(hill, GOOD, 0.5), bob)
    code, out, err = rescore(capsys, str(download(session(bob), sub, tmp_path)), "--key", key_file(tmp_path))
    assert code == 0, out + err
    assert "files match the manifest" in out and "submission #%d of project hill" % sub.pk in out
    assert "PASS  defines `Optimizer.step`" in out
    assert "validator here (in the worker sandbox): passed (exited 0); on the server: passed" in out
    assert "claimed score holds: the validator passes" in out


def test_an_invalid_submission_is_rescored_and_does_not_hold(hill, bob, tmp_path, capsys):
    sub = verified(scored(hill, BAD, 0.9), bob)
    assert sub.status == "invalid" and sub.verification_outcome == "failed"
    path = download(session(bob), sub, tmp_path)
    code, out, _ = rescore(capsys, str(path), "--key", key_file(tmp_path), "--json")
    verdict = json.loads(out)
    assert code == 1
    assert verdict["verdict"] == "does not hold" and verdict["outcome"] == "failed"
    assert verdict["server_outcome"] == "failed" and verdict["validator_exit_code"] == 1
    assert verdict["sandbox"] == "worker" and verdict["submission"] == sub.pk


def test_a_tampered_bundle_or_another_key_is_refused_before_anything_runs(hill, bob, tmp_path, capsys):
    sub = verified(scored(hill, GOOD, 0.5), bob)
    path = download(session(bob), sub, tmp_path)
    root = f"smrweb-bundle-hill-{sub.pk}"

    def repacked(name: str, change) -> str:
        out = tmp_path / f"tampered-{len(list(tmp_path.iterdir()))}.tar.gz"
        with tarfile.open(path, "r:gz") as src, tarfile.open(out, "w:gz") as dst:
            for member in src.getmembers():
                data = src.extractfile(member).read() if member.isfile() else None
                if member.name == f"{root}/{name}":
                    data = change(data)
                    member.size = len(data)
                dst.addfile(member, io.BytesIO(data) if data is not None else None)
        return str(out)

    # A validator script that always passes, swapped in: refused by its digest, never run.
    evil = repacked("validator/optimizer_py.py", lambda _: b"import sys; print('score: 0.99'); sys.exit(0)\n")
    code, _, err = rescore(capsys, evil, "--key", key_file(tmp_path))
    assert code == 4 and "bundle refused: validator/optimizer_py.py does not match the manifest" in err

    flipped = repacked("artifact/optimizer.py", lambda data: data[:-2] + bytes([data[-2] ^ 1]) + data[-1:])
    code, _, err = rescore(capsys, flipped, "--key", key_file(tmp_path))
    assert code == 4 and "artifact/optimizer.py does not match the manifest" in err

    def claim_more(data: bytes) -> bytes:
        manifest = json.loads(data)
        manifest["claimed_score"] = 0.99
        return bundles.manifest_bytes(manifest)

    code, _, err = rescore(capsys, repacked("manifest.json", claim_more), "--key", key_file(tmp_path))
    assert code == 4 and "the signature does not match the manifest" in err

    stranger = bundles.describe_key(bundles.signing_key("some other server"))["public_key"]
    code, _, err = rescore(capsys, str(path), "--key", stranger)
    assert (
        code == 4 and f"signed by key {bundles.key_id(server_bundles.signing_key())}, not by the key" in err
    )

    code, _, err = rescore(capsys, str(path))
    assert code == 2 and "give the key you trust" in err


# --- who may download it ----------------------------------------------------------------------------


def test_the_api_answers_json_errors_for_bad_ids_strangers_and_no_artifact(hill, bob, carol, tmp_path):
    sub = scored(hill, GOOD, 0.5)
    url = f"/api/v1/projects/hill/submissions/{sub.pk}/bundle"
    for client, status in ((APIClient(), {401, 403}), (session(carol), {404})):
        response = client.get(url)
        assert response.status_code in status and response.json()["code"], response.content
    for bad in (
        f"/api/v1/projects/hill/submissions/{sub.pk + 1000}/bundle",
        "/api/v1/projects/hill/submissions/99999999999999999999/bundle",
        "/api/v1/projects/nope/submissions/1/bundle",
        "/api/v1/projects/hill/submissions/abc/bundle",
    ):
        response = session(bob).get(bad)
        assert response.status_code == 404, (bad, response.content[:300])
        assert response["Content-Type"].startswith("application/json") and response.json()["code"]
    push(hill, "r2", {"type": "score", "score": 0.1})
    bare = Submission.objects.filter(run__external_id="r2").get()
    response = session(bob).get(f"/api/v1/projects/hill/submissions/{bare.pk}/bundle")
    assert response.status_code == 409 and response.json()["code"] == "no_artifact"


def test_a_project_token_reads_the_bundle_like_the_submission(hill, api, tmp_path):
    sub = scored(hill, GOOD, 0.5)
    path = download(api, sub, tmp_path)
    assert bundles.open_bundle(path, [server_bundles.signing_key().public_key()], tmp_path / "o").manifest


def test_the_page_offers_the_bundle_and_its_signed_link_works_without_an_account(hill, bob, victor, tmp_path):
    sub = verified(scored(hill, GOOD, 0.5), bob)
    page = Client()
    page.force_login(victor)  # a viewer reads the submission, so the bundle too
    html = page.get(f"/projects/hill/submissions/{sub.pk}/").content.decode()
    assert "Download bundle" in html and "Copy bundle link" in html
    panel = page.get(f"/projects/hill/submissions/{sub.pk}/review-panel", headers={"HX-Request": "true"})
    assert f'href="/projects/hill/submissions/{sub.pk}/bundle" download' in panel.content.decode()
    direct = page.get(f"/projects/hill/submissions/{sub.pk}/bundle")
    assert direct.status_code == 200 and direct["Content-Type"] == "application/gzip"
    body = b"".join(direct.streaming_content)

    link = re.search(r'data-copy="(/b/[^"]+/)" data-copy-label="bundle link"', html)[1]
    anonymous = Client()
    response = anonymous.get(link)
    assert response.status_code == 200 and b"".join(response.streaming_content) == body
    assert response["Cache-Control"] == "private, no-store" and "sessionid" not in response.cookies
    head = anonymous.head(link)
    assert head.status_code == 200 and head["X-Content-SHA256"] == hashlib.sha256(body).hexdigest()

    # An artifact's link never opens a bundle, nor a bundle's link an artifact.
    token = link.split("/")[2]
    assert anonymous.get(f"/a/{token}/").status_code == 403
    artifact_link = re.search(r'data-copy="(/a/[^"]+/)" data-copy-label="signed link"', html)[1]
    assert anonymous.get(f"/b/{artifact_link.split('/')[2]}/").status_code == 403
    # Altered, unknown or expired: refused, never a 500.
    assert anonymous.get(link[:-3] + ("A" if link[-3] != "A" else "B") + "/").status_code == 403
    assert anonymous.get("/b/not-a-token/").status_code == 403
    assert anonymous.get(f"/b/{sub.pk + 1000}.zzz.{'A' * 43}/").status_code == 403
    with time_machine.travel(timezone.now() + timedelta(days=30), tick=False):
        assert anonymous.get(link).status_code == 410


def test_a_stranger_gets_no_bundle_from_the_page(hill, carol):
    sub = scored(hill, GOOD, 0.5)
    page = Client()
    page.force_login(carol)
    assert page.get(f"/projects/hill/submissions/{sub.pk}/bundle").status_code == 404
    assert Client().get(f"/projects/hill/submissions/{sub.pk}/bundle").status_code == 302  # to sign in


@pytest.mark.django_db(transaction=True)
def test_rescore_fetches_the_key_from_the_server_without_an_account(live_server, hill, bob, tmp_path, capsys):
    sub = verified(scored(hill, GOOD, 0.5), bob)
    path = download(session(bob), sub, tmp_path)
    code, out, err = rescore(capsys, str(path), "--server", live_server.url)
    assert code == 0, out + err
    assert f"signed by key {bundles.key_id(server_bundles.signing_key())}" in out
    code, _, err = rescore(capsys, str(path), "--server", "http://127.0.0.1:9")
    assert code == 3 and "key server unreachable" in err


# --- what the verdict compares --------------------------------------------------------------------------

SCORING = "import sys; print('checked', sys.argv[1]); print('score: 0.5')"


@pytest.mark.parametrize(
    "claimed, code, said", [(0.5, 0, "scores 0.5, as claimed (exactly)"), (0.6, 1, "not the claimed 0.6")]
)
def test_a_validator_that_prints_a_score_must_print_the_claimed_one(
    project, bob, tmp_path, capsys, claimed, code, said
):
    project.scenario.validator_command = ["python3", "-c", SCORING, "{artifact}"]
    project.scenario.save()
    sub = verified(scored(project, GOOD, claimed), bob)
    assert sub.verification_outcome == "passed"
    path = download(session(bob), sub, tmp_path)
    got, out, err = rescore(capsys, str(path), "--key", key_file(tmp_path), "--json")
    verdict = json.loads(out)
    assert got == code and said in verdict["reason"], out + err
    assert verdict["rescored"] == 0.5


def test_no_validator_cannot_be_rescored_and_unconfined_is_said(project, bob, tmp_path, capsys):
    sub = scored(project, GOOD, 0.5)  # the generic scenario: no validator
    code, out, _ = rescore(capsys, str(download(session(bob), sub, tmp_path)), "--key", key_file(tmp_path))
    assert (
        code == 5
        and "cannot re-score here: the validator could not run here: the scenario has no validator" in out
    )


def test_unconfined_runs_the_same_validator_without_the_sandbox(hill, bob, tmp_path, capsys):
    sub = verified(scored(hill, GOOD, 0.5), bob)
    path = download(session(bob), sub, tmp_path)
    code, out, _ = rescore(capsys, str(path), "--key", key_file(tmp_path), "--unconfined", "--json")
    verdict = json.loads(out)
    assert code == 0 and verdict["sandbox"] == "none" and verdict["outcome"] == "passed"


def test_someone_who_is_not_root_rescores_in_bubblewrap_as_themselves(hill, bob, tmp_path):
    """`smrweb rescore` run by an ordinary user (here: nobody) in a process of its own: the validator runs
    in the personal sandbox (namespaces of its own, no uid or cgroup needed), and the claim holds."""
    sub = verified(scored(hill, GOOD, 0.5), bob)
    shared = Path(tempfile.mkdtemp(prefix="smrweb-rescore-test-"))
    try:
        shared.chmod(0o755)
        bundle = shared / "bundle.tar.gz"
        bundle.write_bytes(download(session(bob), sub, tmp_path).read_bytes())
        key = shared / "key.json"
        key.write_text(Path(key_file(tmp_path)).read_text())
        for path in (bundle, key):
            path.chmod(0o644)
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        done = subprocess.run(
            [
                *nobody,
                sys.executable,
                "-m",
                "smrweb.cli",
                "rescore",
                str(bundle),
                "--key",
                str(key),
                "--json",
            ],
            cwd=Path(__file__).resolve().parents[2],
            env={"PATH": os.environ["PATH"], "HOME": str(shared), "LANG": "C.UTF-8"},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        shutil.rmtree(shared, ignore_errors=True)
    assert done.returncode == 0, done.stdout + done.stderr
    verdict = json.loads(done.stdout)
    assert (
        verdict["sandbox"] == "personal" and verdict["outcome"] == "passed" and verdict["verdict"] == "holds"
    )


def test_the_manifest_facts_cost_a_fixed_number_of_queries(hill, bob, django_assert_max_num_queries):
    from smrweb.tracking.queries.bundles import bundle_facts, bundled_submission

    subs = [scored(hill, GOOD + b"#%d\n" % i, 0.1 * (i + 1), run=f"r{i % 2}") for i in range(4)]
    for sub in subs:
        with django_assert_max_num_queries(4):  # the submission with its rows, the launch, the messages
            facts, kickoff = bundle_facts(bundled_submission(hill, sub.pk))
        assert facts["submission"]["id"] == sub.pk and kickoff == "Tune the optimizer's warm-up."
