"""GET /api/v1/projects/{project}/submissions/{id}/diff?against=approved|best|<id>."""

from __future__ import annotations

import difflib

import pytest

from smrweb.tracking.models import SubmissionStatus as S
from tests.api.helpers import assert_json_error, session_client
from tests.review.helpers import submit

pytestmark = pytest.mark.django_db

V1 = b"LR = 0.001\n\n\nclass Optimizer:\n    def step(self):\n        return 1\n"
V2 = V1.replace(b"0.001", b"0.003") + b"\n    def zero_grad(self):\n        pass\n"
V3 = b"LR = 0.002\n\n\nclass Optimizer:\n    def step(self):\n        return 2\n"


def url(sub, against=None):
    base = f"/api/v1/projects/{sub.project.slug}/submissions/{sub.pk}/diff"
    return base + (f"?against={against}" if against is not None else "")


@pytest.fixture
def three(project):
    """v1 approved (0.5), v3 verified and the project's best (0.9), v2 under review (0.7)."""
    approved = submit(project, V1, score=0.5, status=S.APPROVED)
    best = submit(project, V3, score=0.9, run="r2", status=S.VERIFIED)
    reviewed = submit(project, V2, score=0.7, status=S.VERIFIED)
    return approved, best, reviewed


def test_against_the_previous_approved_by_default(project, bob, three):
    approved, _, reviewed = three
    body = session_client(bob).get(url(reviewed)).json()
    assert body["against"]["id"] == approved.pk and body["against"]["status"] == "approved"
    assert body["against"]["chosen_as"] == "the previous approved submission at submission/optimizer.py"
    assert body["mode"] == "text" and not body["identical"]
    assert (body["added"], body["removed"]) == (4, 1)
    expected = difflib.unified_diff(
        V1.decode().splitlines(),
        V2.decode().splitlines(),
        f"#{approved.pk}/submission/optimizer.py",
        f"#{reviewed.pk}/submission/optimizer.py",
        lineterm="",
    )
    assert body["unified"] == "\n".join(expected) + "\n"


def test_against_best_and_against_an_id(project, victor, three):
    approved, best, reviewed = three
    viewer = session_client(victor)  # reading a diff is a viewer's right
    body = viewer.get(url(reviewed, "best")).json()
    assert (
        body["against"]["id"] == best.pk and body["against"]["chosen_as"] == "the project's best submission"
    )
    assert (body["added"], body["removed"]) == (5, 2)
    body = viewer.get(url(reviewed, approved.pk)).json()
    assert (
        body["against"]["id"] == approved.pk and body["against"]["chosen_as"] == f"submission #{approved.pk}"
    )
    # The best compared with the best other than itself: the one under review (0.7 > 0.5).
    assert viewer.get(url(best, "best")).json()["against"]["id"] == reviewed.pk


def test_refusals_are_json_errors(project, other_project, bob, carol, three):
    approved, _, reviewed = three
    client = session_client(bob)
    body = assert_json_error(client.get(url(reviewed, "newest")), 400, "invalid")
    assert body["errors"][0]["field"] == "against"
    assert_json_error(client.get(url(reviewed, reviewed.pk)), 400, "invalid")
    assert_json_error(client.get(url(reviewed, 999_999)), 404, "no_comparison")
    # An approved submission before any other: nothing approved to compare with (only itself).
    assert_json_error(client.get(url(approved)), 404, "no_comparison")
    # Another project's submission id is not found here; its people cannot read this project at all.
    elsewhere = submit(other_project, V1, score=0.1)
    assert_json_error(client.get(url(reviewed, elsewhere.pk)), 404, "no_comparison")
    assert session_client(carol).get(url(reviewed)).status_code == 404


def test_a_score_without_stored_bytes_is_not_comparable(project, bob, three):
    from tests.dashboard.test_submission_pages import scored

    bare = scored(project, 0.8)
    assert_json_error(session_client(bob).get(url(bare)), 409, "not_comparable")


def test_identical_bytes_and_binaries(project, bob):
    submit(project, V1, score=0.5, status=S.APPROVED)
    again = submit(project, V1, score=0.6, run="r2")
    body = session_client(bob).get(url(again)).json()
    assert body["identical"] and (body["added"], body["removed"]) == (0, 0) and body["unified"] == ""
    submit(project, b"\x00\x01binary", score=0.5, path="ckpt.bin", status=S.APPROVED)
    other = submit(project, b"\x00\x02binary!", score=0.6, path="ckpt.bin", run="r3")
    body = session_client(bob).get(url(other)).json()
    assert body["mode"] == "binary" and not body["identical"]
    assert body["unified"].startswith("Binary files ") and (body["added"], body["removed"]) == (0, 0)
    assert body["note"] == "Binary content of a kind not compared here: download both to compare them."


def test_binary_artifacts_of_unknown_kind_say_bytes_differ_never_no_changes(project, bob):
    """Issue 33 P1-A: different digests are never "identical"; an unknown binary kind says whose bytes
    differ, with both digests and sizes."""
    old = submit(project, b"\x00\x01weights" * 100, score=0.5, path="ckpt.bin", status=S.APPROVED)
    new = submit(project, b"\x00\x02weights" * 100 + b"!", score=0.6, path="ckpt.bin", run="r2")
    client = session_client(bob)
    body = client.get(url(new)).json()
    sha_old, sha_new = old.artifact.blob.sha256, new.artifact.blob.sha256
    assert body["mode"] == "binary" and body["identical"] is False
    assert (
        body["summary"]
        == f"bytes differ (sha256 {sha_old[:8]}… vs {sha_new[:8]}…, sizes 900 bytes → 901 bytes)"
    )
    assert body["bytes"] == {"old_sha256": sha_old, "new_sha256": sha_new, "old_size": 900, "new_size": 901}
    assert body["weights"] is None and body["same_structure"] is None
    page = client.get(f"/projects/{project.slug}/submissions/{new.pk}/diff").content.decode()
    assert "data-diff-identical" not in page and "no changes" not in page
    assert f"bytes differ (sha256 {sha_old[:8]}… vs {sha_new[:8]}…, sizes 900 bytes → 901 bytes)" in page
    # The same bytes at another run: identical, by digest.
    again = submit(project, b"\x00\x02weights" * 100 + b"!", score=0.7, path="ckpt.bin", run="r3")
    body = client.get(url(again, new.pk)).json()
    assert body["identical"] is True and body["summary"] == "identical bytes"
    page = client.get(
        f"/projects/{project.slug}/submissions/{again.pk}/diff?against={new.pk}"
    ).content.decode()
    assert "data-diff-identical" in page and "identical bytes" in page


def test_text_that_decodes_alike_but_has_other_bytes_is_not_identical(project, bob):
    """The digest comparison comes first: CRLF against LF has no changed line, and still differs."""
    submit(project, V1, score=0.5, status=S.APPROVED)
    crlf = submit(project, V1.replace(b"\n", b"\r\n"), score=0.6, run="r2")
    body = session_client(bob).get(url(crlf)).json()
    assert body["mode"] == "text" and body["identical"] is False
    assert (body["added"], body["removed"]) == (0, 0)
    assert body["summary"].startswith("same text, bytes differ (sha256 ")


def test_project_tokens_read_diffs_too(project, api, three):
    _, _, reviewed = three
    assert api.get(url(reviewed)).json()["added"] == 4


# ONNX models are compared by their summaries, which a worker reads: tests/review/test_onnx_on_a_worker.py.
