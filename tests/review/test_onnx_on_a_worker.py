"""Red-team N2 and N8 (ONNX part): an uploaded model is read on a worker, never in the request.

The page and the API answer at once with "summarising" / 202 pending; the real Celery worker reads the
model in a subprocess under memory and time limits, once per digest, and the page's poll (and the API
asked again) then shows the summary, or "too large / too slow to summarise" and which limit."""

from __future__ import annotations

import random
import threading
import time
from datetime import timedelta

import numpy as np
import pytest
from celery.signals import after_task_publish
from django.db import connection
from django.test import Client
from onnx import numpy_helper

from smrweb.core import onnx_summary
from smrweb.stack.harness import onnx_policy
from smrweb.tracking import services
from smrweb.tracking.models import BlobSummary, SummaryStatus
from smrweb.tracking.models import SubmissionStatus as S
from smrweb.tracking.queries import review
from smrweb.tracking.services import summaries
from tests.conftest import wait_for
from tests.onnx_models import empty_node_bomb, many_operators, mlp_parameters, nested_bomb, policy
from tests.review.helpers import submit

pytestmark = pytest.mark.django_db(transaction=True)

PATH, KIND = "submission/policy.onnx", "onnx_model"
CEILING = 3.0  # seconds for a request: the old code spent ~8 s (2.5 M nodes) to minutes in it


def onnx_submission(project, data: bytes, *, score: float, status=None, run="r1"):
    return submit(project, data, score=score, path=PATH, kind=KIND, status=status, run=run)


def preview_url(sub) -> str:
    return f"/projects/{sub.project.slug}/runs/{sub.run.external_id}/artifacts/{sub.artifact.pk}/preview"


def diff_url(sub, api: bool = False) -> str:
    return ("/api/v1" if api else "") + f"/projects/{sub.project.slug}/submissions/{sub.pk}/diff"


def timed(call):
    started = time.monotonic()
    answer = call()
    return answer, time.monotonic() - started


def summary_of(sub) -> BlobSummary:
    return BlobSummary.objects.get(blob=sub.artifact.blob, kind="onnx", version=onnx_summary.VERSION)


def finished(sub) -> BlobSummary | None:
    row = summary_of(sub)
    return row if row.status != SummaryStatus.PENDING else None


@pytest.fixture
def viewer(victor):
    client = Client()
    client.force_login(victor)
    return client


def test_the_review_bomb_is_answered_at_once_and_refused_by_the_worker(celery_worker, project, viewer, api):
    onnx_submission(project, onnx_policy(random.Random(1), flaw=""), score=0.5, status=S.APPROVED, run="r0")
    bomb = onnx_submission(project, empty_node_bomb(2_500_000), score=0.9)  # 5 MB of empty nodes

    page, seconds = timed(lambda: viewer.get(preview_url(bomb)))
    assert page.status_code == 200 and seconds < CEILING
    assert "data-onnx-pending" in page.content.decode() and "Summarising the model" in page.content.decode()
    answer, seconds = timed(lambda: api.get(diff_url(bomb, api=True)))  # a project token, as in the review
    assert answer.status_code == 202 and seconds < CEILING
    assert answer.json()["status"] == "pending" and answer["Retry-After"] == "1"
    fragment, seconds = timed(lambda: viewer.get(diff_url(bomb)))
    assert seconds < CEILING and "data-diff-pending" in fragment.content.decode()

    row = wait_for(lambda: finished(bomb), timeout=60)
    assert row.status == SummaryStatus.TOO_LARGE and row.result["limit"] == "checks"
    assert "more than 200,000 nodes" in row.reason and row.attempts == 1
    assert row.result["seconds"] < 10  # refused on the wire, not after building 2.5 M nodes

    shown = viewer.get(preview_url(bomb)).content.decode()
    assert "data-onnx-too-large" in shown and "Too large or too slow to summarise" in shown
    assert "data-onnx-pending" not in shown
    refused = api.get(diff_url(bomb, api=True))
    assert refused.status_code == 409 and refused.json()["code"] == "too_large"
    assert "more than 200,000 nodes" in refused.json()["message"]
    assert "data-diff-refusal" in viewer.get(diff_url(bomb)).content.decode()


def test_a_bomb_past_the_wire_checks_is_stopped_by_the_memory_cap(celery_worker, project, viewer, settings):
    # 8 M nodes inside one If node's subgraph: only parsing finds them, and parsing them needs ~1.3 GB.
    bomb = onnx_submission(project, nested_bomb(8_000_000), score=0.9)
    page, seconds = timed(lambda: viewer.get(preview_url(bomb)))
    assert seconds < CEILING and "data-onnx-pending" in page.content.decode()

    row = wait_for(lambda: finished(bomb), timeout=90)
    assert row.status == SummaryStatus.TOO_LARGE
    assert row.result["limit"] == "memory", row.result  # the subprocess's RLIMIT_AS ended it
    memory = settings.SMRWEB_SUMMARY_MEMORY_BYTES
    assert row.reason == f"reading it needs more than {memory / 1024**2:,.0f} MiB of memory"
    assert "needs more than 1,024 MiB of memory" in viewer.get(preview_url(bomb)).content.decode()


def test_an_ordinary_model_summarises_end_to_end_through_the_page_and_the_api(
    celery_worker, project, viewer, api
):
    onnx_submission(project, onnx_policy(random.Random(1), flaw=""), score=0.5, status=S.APPROVED, run="r0")
    wide = onnx_submission(project, onnx_policy(random.Random(2), flaw="wide"), score=0.6)

    first = viewer.get(preview_url(wide)).content.decode()
    assert "data-onnx-pending" in first and 'hx-trigger="load delay:1s"' in first  # the page polls

    shown = wait_for(
        lambda: "data-onnx-summary" in (body := viewer.get(preview_url(wide)).content.decode()) and body
    )
    assert "data-onnx-parameters" in shown and "data-onnx-input" in shown and "float32" in shown
    body = wait_for(lambda: (r := api.get(diff_url(wide, api=True))).status_code == 200 and r.json())
    assert body["status"] == "done" and body["mode"] == "onnx" and not body["identical"]
    fields = {row["field"]: row for row in body["structural"]}
    assert fields["parameters"]["new"] >= 250_000 > fields["parameters"]["old"]
    fragment = viewer.get(diff_url(wide)).content.decode()
    assert "data-structural" in fragment and "<code>parameters</code>" in fragment


def test_concurrent_requests_claim_and_queue_one_computation(celery_worker, project, viewer):
    sub = onnx_submission(project, onnx_policy(random.Random(3), flaw=""), score=0.5)
    queued = []

    def count(sender=None, **kwargs):
        if sender == "smrweb.sources.tasks.summarize_blob":
            queued.append(sender)

    after_task_publish.connect(count, weak=False)
    barrier, answers, errors = threading.Barrier(6), [], []

    def ask():
        try:
            barrier.wait()
            answers.append(review.onnx_summary_of(sub.artifact).status)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    try:
        threads = [threading.Thread(target=ask) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors and len(answers) == 6
        row = wait_for(lambda: finished(sub), timeout=60)
        assert row.status == SummaryStatus.DONE and row.attempts == 1
        assert queued == ["smrweb.sources.tasks.summarize_blob"]  # one claim, one task
        assert BlobSummary.objects.count() == 1
        # The same bytes in another run are the same blob: read once, shown at once.
        again = onnx_submission(project, onnx_policy(random.Random(3), flaw=""), score=0.6, run="r2")
        assert "data-onnx-summary" in viewer.get(preview_url(again)).content.decode()
        assert queued == ["smrweb.sources.tasks.summarize_blob"]
    finally:
        after_task_publish.disconnect(count)


def test_a_lost_claim_is_queued_again_by_the_next_request(project):
    sub = onnx_submission(project, onnx_policy(random.Random(4), flaw=""), score=0.5)
    row = services.claimed_summary(sub.artifact.blob, "onnx", onnx_summary.VERSION)
    assert services.claimed_summary(sub.artifact.blob, "onnx", onnx_summary.VERSION).attempts == 1
    lost = timedelta(seconds=summaries.CLAIM_SECONDS + 1)  # no worker started it: the broker lost it
    BlobSummary.objects.filter(pk=row.pk).update(claimed=row.claimed - lost)
    assert services.claimed_summary(sub.artifact.blob, "onnx", onnx_summary.VERSION).attempts == 2


def test_two_models_with_summaries_too_long_to_diff_answer_409_not_500(celery_worker, project, viewer, api):
    # Red-team N8: 30,010 distinct operators each (~289 KB): the summaries' line diff is refused.
    onnx_submission(project, many_operators(30_010, prefix="A"), score=0.5, status=S.APPROVED, run="r0")
    new = onnx_submission(project, many_operators(30_010, prefix="B"), score=0.6)
    wait_for(lambda: api.get(diff_url(new, api=True)).status_code != 202, timeout=60)

    answer = api.get(diff_url(new, api=True))
    assert answer.status_code == 409 and answer.json()["code"] == "too_large"
    assert "too large to diff here (over 30,000 lines on a side)" in answer.json()["message"]
    page = viewer.get(diff_url(new))
    assert page.status_code == 200 and "data-diff-refusal" in page.content.decode()
    assert "too large to diff here" in page.content.decode()


# --- issue 33 P1-A: two models of one graph with other weights -------------------------------------


def retrained_pair(seed: int = 5):
    """The review's case: one graph (the small MLP), two sets of weights. (old, new) models and the
    expected figures, computed with numpy from the tensors themselves."""
    old, new = policy(32), policy(32)
    rng = np.random.default_rng(seed)
    for tensor in new.graph.initializer:
        values = numpy_helper.to_array(tensor).copy()
        if tensor.name == "w1":  # a fine-tune: about a third of the first layer moves a little
            values += (rng.normal(0, 0.02, values.shape) * (rng.random(values.shape) < 0.3)).astype(
                np.float32
            )
        elif tensor.name == "b2":
            values[1] += np.float32(0.75)
        tensor.CopyFrom(numpy_helper.from_array(values, tensor.name))
    a = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in old.graph.initializer}
    b = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in new.graph.initializer}
    change = np.concatenate([np.abs(a[n] - b[n]).reshape(-1) for n in a])
    expected = {
        "tensors_changed": sum(bool((a[n] != b[n]).any()) for n in a),
        "parameters_compared": change.size,
        "parameters_changed": int(np.count_nonzero(change)),
        "max_abs_change": float(change.max()),
        "mean_abs_change": float(change.mean()),
    }
    return old.SerializeToString(), new.SerializeToString(), expected


def test_same_graph_other_weights_say_weights_differ_with_true_figures(celery_worker, project, viewer, api):
    """The review's P1-A: #1523 against #1516, same size, other sha256 and score: the page said "no
    changes" and the API `identical: true`. Now both say the weights differ, with numbers."""
    old_bytes, new_bytes, expected = retrained_pair()
    assert len(old_bytes) == len(new_bytes)  # as in the review: same size, other digest
    old = onnx_submission(project, old_bytes, score=1209, status=S.VERIFIED, run="r0")
    new = onnx_submission(project, new_bytes, score=1218)
    sha_old, sha_new = old.artifact.blob.sha256, new.artifact.blob.sha256

    first = api.get(diff_url(new, api=True) + f"?against={old.pk}")
    assert first.status_code == 202  # summaries, then the weights, are read on the worker
    body = wait_for(
        lambda: (
            (r := api.get(diff_url(new, api=True) + f"?against={old.pk}")).status_code == 200 and r.json()
        ),
        timeout=60,
    )
    assert body["identical"] is False and body["mode"] == "onnx"
    assert body["same_structure"] is True and body["structural"] == []
    assert body["summary"] == f"same structure, weights differ (sha256 {sha_old[:8]}… vs {sha_new[:8]}…)"
    assert body["bytes"]["old_sha256"] == sha_old and body["bytes"]["new_sha256"] == sha_new
    weights = body["weights"]
    assert weights["status"] == "done" and weights["reason"] == ""
    assert (weights["added"], weights["removed"], weights["reshaped"]) == ([], [], [])
    assert weights["tensors_compared"] == 4 and weights["tensors_changed"] == expected["tensors_changed"] == 2
    assert weights["parameters_compared"] == expected["parameters_compared"] == mlp_parameters(32)
    assert weights["parameters_changed"] == expected["parameters_changed"] > 1000
    assert weights["max_abs_change"] == pytest.approx(expected["max_abs_change"], rel=1e-9)
    assert weights["mean_abs_change"] == pytest.approx(expected["mean_abs_change"], rel=1e-9)
    assert [row["name"] for row in weights["tensors"]] == ["b2", "w1"]  # the largest change first
    assert weights["tensors"][0]["changed"] == 1 and weights["tensors"][0]["max_abs_change"] == pytest.approx(
        0.75
    )
    assert "tensor w1: float32[224, 32] sha256" in body["unified"]  # the summaries' lines name the tensors

    page = viewer.get(diff_url(new) + f"?against={old.pk}").content.decode()
    assert "no changes" not in page and "data-diff-identical" not in page
    assert f"same structure, weights differ (sha256 {sha_old[:8]}… vs {sha_new[:8]}…)" in page
    assert f'data-parameters-changed="{expected["parameters_changed"]}"' in page
    assert f"{expected['parameters_changed']:,} of {mlp_parameters(32):,}" in page
    assert 'data-tensor="w1"' in page and 'data-tensor="b2"' in page

    # Compared once per pair: the other way round reads the same row, with the same figures.
    pairs = BlobSummary.objects.filter(kind=summaries.ONNX_WEIGHTS)
    assert pairs.count() == 1 and pairs.get().status == SummaryStatus.DONE
    back = api.get(diff_url(old, api=True) + f"?against={new.pk}").json()
    assert back["weights"]["parameters_changed"] == expected["parameters_changed"]
    assert pairs.count() == 1


def test_equal_weights_and_equal_graph_with_other_bytes_are_still_not_identical(celery_worker, project, api):
    old_bytes, _, _ = retrained_pair()
    m = policy(32)
    m.producer_version = "2"  # metadata only
    m.graph.node[0].name = "first"
    old = onnx_submission(project, old_bytes, score=0.5, status=S.APPROVED, run="r0")
    new = onnx_submission(project, m.SerializeToString(), score=0.6)
    body = wait_for(
        lambda: (r := api.get(diff_url(new, api=True))).status_code == 200 and r.json(), timeout=60
    )
    assert body["identical"] is False and body["weights"]["tensors_changed"] == 0
    assert (
        body["weights"]["parameters_compared"] == mlp_parameters(32)
        and body["weights"]["max_abs_change"] == 0
    )
    assert body["structural"] == [
        {"field": "producer", "old": "smrweb-tests", "new": "smrweb-tests 2", "change": "changed"}
    ]
    assert body["summary"].startswith("structure differs, same weights (sha256 ")
    assert not BlobSummary.objects.filter(kind=summaries.ONNX_WEIGHTS).exists()  # nothing to read twice
    assert old.pk == body["against"]["id"]


@pytest.fixture
def test_is_the_worker():
    """Nothing is queued: the test runs the worker's code itself (with its own settings)."""
    from smrweb import tasks
    from smrweb.tracking.signals import summary_wanted

    summary_wanted.disconnect(dispatch_uid="smrweb-summary-wanted")
    yield
    summary_wanted.connect(tasks.queue_summary, dispatch_uid="smrweb-summary-wanted")


def test_weights_past_the_limits_say_too_large_to_compare_and_keep_the_rest(
    project, viewer, api, settings, test_is_the_worker
):
    """The comparison runs in the summary's bounded subprocess: past its limits, the diff still shows
    the graph and the tensors' names and digests, and says the weights were too large to compare."""
    from smrweb.sources import summaries as worker

    old_bytes, new_bytes, _ = retrained_pair()
    old = onnx_submission(project, old_bytes, score=0.5, status=S.APPROVED, run="r0")
    new = onnx_submission(project, new_bytes, score=0.6)
    for sub in (old, new):  # the summaries, under the usual limits
        review.onnx_summary_of(sub.artifact)
        assert worker.summarize(summary_of(sub).pk) == SummaryStatus.DONE
    assert api.get(diff_url(new, api=True)).status_code == 202  # the pair is claimed
    settings.SMRWEB_SUMMARY_WALL_SECONDS = 0.05  # no Python starts, let alone compares, in 50 ms
    pair = BlobSummary.objects.get(kind=summaries.ONNX_WEIGHTS)
    assert worker.summarize(pair.pk) == SummaryStatus.TOO_LARGE

    body = api.get(diff_url(new, api=True)).json()
    assert body["identical"] is False and body["weights"]["status"] == "too_large"
    assert body["weights"]["reason"] == "reading it takes more than 0.05 s"
    assert body["weights"]["tensors_changed"] == 2  # by digest
    assert body["summary"].startswith(
        "same structure, weights not compared: reading it takes more than 0.05 s"
    )
    page = viewer.get(diff_url(new)).content.decode()
    assert "data-weights-not-compared" in page and "Too large to compare weights" in page
    assert "no changes" not in page
