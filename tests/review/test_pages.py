"""The workbench's pages: previews on the run and submission pages, the diff fragment, and the review
queue's panel with approve / reject in place."""

from __future__ import annotations

import pytest

from smrweb.tracking.models import Submission
from smrweb.tracking.models import SubmissionStatus as S
from tests.review.helpers import submit
from tests.review.test_diff_api import V1, V2

pytestmark = pytest.mark.django_db


def login(client, user):
    client.force_login(user)
    return client


def preview_url(sub, more=False):
    artifact = sub.artifact
    base = f"/projects/hill/runs/{sub.run.external_id}/artifacts/{artifact.pk}/preview"
    return base + ("?more=1" if more else "")


def test_run_page_offers_a_preview_per_artifact_and_the_fragment_escapes(client, victor, project):
    sub = submit(project, b"print('<script>x</script>')\n", score=0.5)
    body = login(client, victor).get(f"/projects/hill/runs/{sub.run.external_id}/").content.decode()
    assert f'id="artifact-preview-{sub.artifact.pk}"' in body and 'hx-trigger="toggle once' in body
    fragment = client.get(preview_url(sub)).content.decode()
    assert 'data-preview="code"' in fragment and "Python" in fragment
    assert "<script>" not in fragment and "&lt;script&gt;" in fragment


def test_a_large_artifact_shows_more_then_sends_to_download(client, victor, project):
    big = b"".join(b"value_%06d = %d\n" % (i, i) for i in range(20_000))  # ~340 KB
    sub = submit(project, big, score=0.5, path="data/values.py")
    fragment = login(client, victor).get(preview_url(sub)).content.decode()
    assert "data-preview-truncated" in fragment and "data-show-more" in fragment and "?more=1" in fragment
    more = client.get(preview_url(sub, more=True)).content.decode()
    assert "data-preview-truncated" not in more and more.count('<td class="ln">') == 20_000


def test_outsiders_get_404_for_previews_and_diffs(client, carol, project):
    sub = submit(project, V1, score=0.5)
    login(client, carol)
    assert client.get(preview_url(sub)).status_code == 404
    assert client.get(f"/projects/hill/submissions/{sub.pk}/diff").status_code == 404
    assert client.get(f"/projects/hill/submissions/{sub.pk}/review-panel").status_code == 404


def test_submission_page_loads_the_diff_and_preview(client, victor, project):
    submit(project, V1, score=0.5, status=S.APPROVED)
    sub = submit(project, V2, score=0.7, status=S.VERIFIED)
    body = login(client, victor).get(f"/projects/hill/submissions/{sub.pk}/").content.decode()
    assert f'hx-get="/projects/hill/submissions/{sub.pk}/diff"' in body
    assert f'hx-get="{preview_url(sub)}"' in body


def test_diff_fragment_side_by_side_unified_and_the_picker(client, victor, project):
    approved = submit(project, V1, score=0.5, status=S.APPROVED)
    other = submit(project, V1 + b"# other\n", score=0.6, run="r2")
    sub = submit(project, V2, score=0.7, status=S.VERIFIED)
    submit(project, b"x", score=0.1, path="elsewhere.txt", run="r3")
    login(client, victor)
    split = client.get(f"/projects/hill/submissions/{sub.pk}/diff").content.decode()
    assert 'data-view="split"' in split and 'data-added="4"' in split and 'data-removed="1"' in split
    assert '<tr class="change">' in split and split.count('<tr class="add">') == 3
    # The picker offers the other submissions at the same path, not the one at elsewhere.txt.
    assert f'<option value="{approved.pk}"' in split and f'<option value="{other.pk}"' in split
    assert split.count("<option value=") == 4  # approved, best, and those two
    unified = client.get(f"/projects/hill/submissions/{sub.pk}/diff?view=unified&against={other.pk}")
    unified = unified.content.decode()
    assert 'data-view="unified"' in unified and f'value="{other.pk}" selected' in unified
    assert unified.count('<tr class="del">') == 2 and unified.count('<tr class="add">') == 4
    first = client.get(f"/projects/hill/submissions/{approved.pk}/diff?against=approved").content.decode()
    assert "data-diff-refusal" in first and "No approved submission" in first
    # Opened without a choice, a diff with nothing approved before falls back to the project's best.
    first = client.get(f"/projects/hill/submissions/{approved.pk}/diff").content.decode()
    assert "data-diff-fallback" in first and 'value="best" selected' in first and "data-added" in first


def test_queue_rows_expand_into_a_panel_with_a_keyboard_hint(client, bob, project):
    submit(project, V1, score=0.5, status=S.APPROVED)
    sub = submit(project, V2, score=0.7, status=S.VERIFIED)
    body = login(client, bob).get("/projects/hill/review/").content.decode()
    assert "data-workbench" in body and "data-kbd-hint" in body and "<kbd>a</kbd> approve" in body
    assert f'hx-get="/projects/hill/submissions/{sub.pk}/review-panel" hx-trigger="smrweb:open once"' in body
    panel = client.get(f"/projects/hill/submissions/{sub.pk}/review-panel").content.decode()
    assert 'data-preview="code"' in panel and 'data-added="4"' in panel
    assert 'data-act="approve"' in panel and 'data-act="reject"' in panel


def test_viewers_see_the_panel_without_the_review_form(client, victor, project):
    sub = submit(project, V2, score=0.7, status=S.VERIFIED)
    panel = login(client, victor).get(f"/projects/hill/submissions/{sub.pk}/review-panel").content.decode()
    assert "data-review-panel" in panel and "data-act=" not in panel
    response = client.post(f"/projects/hill/submissions/{sub.pk}/queue-review/approve", {"comment": "x"})
    assert response.status_code == 403
    assert Submission.objects.get(pk=sub.pk).status == S.VERIFIED


def test_approve_in_place_returns_the_panel_and_the_rows_new_badge(client, bob, project):
    sub = submit(project, V2, score=0.7, status=S.VERIFIED)
    response = login(client, bob).post(
        f"/projects/hill/submissions/{sub.pk}/queue-review/approve", {"comment": "clean change"}
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert Submission.objects.get(pk=sub.pk).status == S.APPROVED
    assert "data-outcome" in body and f'id="status-{sub.pk}" hx-swap-oob="true"' in body
    assert 'data-sub-status="approved"' in body and 'data-act="approve"' not in body


def test_reject_needs_a_reason_and_a_refusal_changes_nothing(client, bob, project):
    sub = submit(project, V2, score=0.7, status=S.VERIFIED)
    login(client, bob)
    response = client.post(f"/projects/hill/submissions/{sub.pk}/queue-review/reject", {"comment": " "})
    assert response.status_code == 400
    assert 'data-field-error="comment"' in response.content.decode()
    assert Submission.objects.get(pk=sub.pk).status == S.VERIFIED
    candidate = submit(project, V1, score=0.2, run="r2")
    response = client.post(f"/projects/hill/submissions/{candidate.pk}/queue-review/approve", {})
    assert (
        response.status_code == 400 and "Only verified submissions are reviewed" in response.content.decode()
    )
    response = client.post(f"/projects/hill/submissions/{sub.pk}/queue-review/shrug", {})
    assert response.status_code == 400 and Submission.objects.get(pk=sub.pk).status == S.VERIFIED
    response = client.post(
        f"/projects/hill/submissions/{sub.pk}/queue-review/reject", {"comment": "overfits"}
    )
    assert response.status_code == 200 and Submission.objects.get(pk=sub.pk).status == S.REJECTED


def test_a_preview_is_drawn_once_per_blob_and_then_served_from_the_cache(client, victor, project):
    from smrweb.tracking.services.artifacts import artifact_storage

    sub = submit(project, b"def f():\n    return 1\n", score=0.5)
    login(client, victor)
    first = client.get(preview_url(sub)).content.decode()
    # The bytes never change for a digest, so neither does the preview: with the stored file gone, the
    # same preview still comes back (drawn once, not read and lexed again on every open).
    artifact_storage().delete(sub.artifact.blob.storage_name)
    assert client.get(preview_url(sub)).content.decode() == first


def test_previews_and_the_review_panel_work_with_the_cache_down(client, victor, project, settings):
    """The preview cache only saves work: a Redis that is down (nothing listens on port 1) makes every
    read a miss, so the preview is drawn each time instead of answering 500."""
    sub = submit(project, b"def f():\n    return 1\n", score=0.5, status=S.VERIFIED)
    settings.CACHES = {
        "default": {
            "BACKEND": "smrweb.core.rediscache.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",
            "OPTIONS": {"socket_connect_timeout": 0.2, "socket_timeout": 0.2},
        }
    }
    login(client, victor)
    fragment = client.get(preview_url(sub))
    assert fragment.status_code == 200 and "Python" in fragment.content.decode()
    panel = client.get(f"/projects/hill/submissions/{sub.pk}/review-panel")
    assert panel.status_code == 200 and 'data-preview="code"' in panel.content.decode()
    page = client.get(f"/projects/hill/runs/{sub.run.external_id}/")
    assert page.status_code == 200  # the clock preference is read from its row


def test_the_picker_reaches_a_submission_older_than_the_newest_hundred(client, victor, project):
    """Issue 33 P3: from #187 the reviewer could not pick #193, the list held only the newest ~100 at the
    path. Any submission is picked by its number, and then shows as the one selected."""
    from smrweb.tracking.queries.review import PICKER_LIMIT

    oldest = submit(project, V1, score=0.1, run="r-old")
    for i in range(PICKER_LIMIT + 4):
        submit(project, V1 + f"# {i}\n".encode(), score=0.2 + i / 1000, run=f"r{i}")
    sub = submit(project, V2, score=0.9, status=S.VERIFIED)
    login(client, victor)
    fragment = client.get(f"/projects/hill/submissions/{sub.pk}/diff").content.decode()
    assert f'<option value="{oldest.pk}"' not in fragment  # the list stays the newest hundred
    assert "data-diff-against-number" in fragment and 'name="against"' in fragment
    assert "data-diff-picker-more" in fragment and "5 older at this path not listed" in fragment
    picked = client.get(f"/projects/hill/submissions/{sub.pk}/diff?against={oldest.pk}&view=split")
    picked = picked.content.decode()
    assert f'<option value="{oldest.pk}" selected' in picked
    assert f"submission #{oldest.pk}" in picked and 'data-added="4"' in picked
    # A number that is no submission of this project is said in place.
    missing = client.get(f"/projects/hill/submissions/{sub.pk}/diff?against=999999").content.decode()
    assert "data-diff-refusal" in missing and "No submission #999999 in this project." in missing
