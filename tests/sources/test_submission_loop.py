"""The submission loop through a real Celery worker: verification runs the scenario's validator in the
sandbox; rollbacks restore a checkpoint in the SMR simulator or POST a signed webhook to a local
receiver (retried with backoff), exactly once however often they are requested."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from django.db import close_old_connections

from smrweb.outbound import webhooks
from smrweb.sources import sync
from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import Checkpoint, Rollback, Run, Submission
from smrweb.tracking.services import rollbacks
from smrweb.tracking.services import submissions as lifecycle
from tests.conftest import wait_for
from tests.factories import admin_project

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

CHECK_PREFIX = (
    "import sys; data = open(sys.argv[1], 'rb').read(); print('checked', len(data), 'bytes'); "
    "sys.exit(0 if data.startswith(b'ok') else 1)"
)


def scored_with_artifact(project, content: bytes, run="r1") -> Submission:
    artifact, _ = services.store_artifact(
        project, run, path="submission/optimizer.py", content=io.BytesIO(content)
    )
    services.ingest_events(
        project,
        run,
        parse_events(json.dumps([{"type": "score", "score": 0.5, "artifact": artifact.blob.sha256}])),
    )
    return Submission.objects.filter(project=project).order_by("-id").first()


@pytest.fixture
def validated(project):
    project.scenario.validator_command = ["python3", "-c", CHECK_PREFIX, "{artifact}"]
    project.scenario.save()
    return project


def test_verification_runs_the_validator_on_a_worker(client, bob, validated, celery_worker):
    good = scored_with_artifact(validated, b"ok: a fine optimizer\n")
    bad = scored_with_artifact(validated, b"import os; os.system('boom')\n", run="r2")
    client.force_login(bob)
    for sub in (good, bad):
        assert client.post(f"/projects/hill/submissions/{sub.pk}/verify").status_code == 302
    wait_for(lambda: Submission.objects.get(pk=good.pk).status == "verified")
    wait_for(lambda: Submission.objects.get(pk=bad.pk).status == "invalid")
    good.refresh_from_db()
    bad.refresh_from_db()
    assert good.verification_outcome == "passed" and good.verification_exit_code == 0
    assert "checked 21 bytes" in good.verification_output
    assert bad.verification_outcome == "failed" and bad.verification_exit_code == 1
    assert [t.reason for t in bad.transitions.all()] == ["verification requested", "exited 1"]


def test_a_project_that_verifies_every_score_does_so_on_its_own(alice, validated, celery_worker):
    """auto_verify: each new score is verified by a worker as it arrives, with nobody as its proposer;
    a candidate that cannot be verified keeps its outcome and is not asked again."""
    services.update_project(validated, auto_verify=True, by=alice)
    good = scored_with_artifact(validated, b"ok: a fine optimizer\n")
    bad = scored_with_artifact(validated, b"import os\n", run="r2")
    wait_for(lambda: Submission.objects.get(pk=good.pk).status == "verified")
    wait_for(lambda: Submission.objects.get(pk=bad.pk).status == "invalid")
    good.refresh_from_db()
    assert good.proposed_by is None and [t.by_label for t in good.transitions.all()] == ["system", "system"]
    assert good.transitions.first().reason == "verified automatically: the project verifies every new score"
    # No artifact: cannot verify, back to candidate with that outcome, and a later score does not retry it.
    services.ingest_events(validated, "r3", parse_events(json.dumps([{"type": "score", "score": 0.1}])))
    orphan = Submission.objects.get(run__external_id="r3")
    wait_for(lambda: Submission.objects.get(pk=orphan.pk).verification_outcome == "cannot_verify")
    scored_with_artifact(validated, b"ok again\n", run="r3")
    wait_for(lambda: Submission.objects.filter(run__external_id="r3", status="verified").count() == 1)
    assert Submission.objects.get(pk=orphan.pk).transitions.count() == 2  # verifying, then back: once
    # A project without the setting verifies nothing by itself.
    services.update_project(validated, auto_verify=False, by=alice)
    idle = scored_with_artifact(validated, b"ok: not asked\n", run="r4")
    assert lifecycle.automatic_verifications(idle.run_id) == []
    assert Submission.objects.get(pk=idle.pk).status == "candidate"


def test_a_missing_validator_or_artifact_is_cannot_verify_not_a_crash(bob, project, celery_worker):
    from smrweb.tasks import verify_submission

    def verify(sub):
        lifecycle.request_verification(sub, by=bob)
        verify_submission.delay(sub.pk)
        wait_for(lambda: Submission.objects.get(pk=sub.pk).verification_outcome == "cannot_verify")
        sub.refresh_from_db()
        assert sub.status == "candidate"  # back where it was: nothing was checked
        return sub.transitions.last().reason

    project.scenario.validator_command = []
    project.scenario.save()
    assert "has no validator command" in verify(scored_with_artifact(project, b"ok"))
    project.scenario.validator_command = ["no-such-validator-binary", "{artifact}"]
    project.scenario.save()
    assert "`no-such-validator-binary` is not installed on this worker" in verify(
        scored_with_artifact(project, b"ok", run="r2")
    )
    services.ingest_events(
        project, "r3", parse_events(b'[{"type": "score", "score": 0.1, "artifact": "x.py"}]')
    )
    assert "the score names `x.py`, which run r3 has not uploaded" in verify(
        Submission.objects.get(run__external_id="r3")
    )


# --- rollback through a signed webhook ------------------------------------------------------------------


class Receiver:
    """A local webhook receiver that answers from a script of statuses and checks signatures."""

    def __init__(self, statuses: list[int], secret: str):
        self.statuses, self.secret, self.seen = list(statuses), secret, []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                stamp, signature = self.headers["X-Smrweb-Timestamp"], self.headers["X-Smrweb-Signature"]
                expected = hmac.new(
                    receiver.secret.encode(), stamp.encode() + b"." + body, hashlib.sha256
                ).hexdigest()
                receiver.seen.append(
                    {
                        "body": json.loads(body),
                        "valid": signature == f"sha256={expected}",
                        "key": self.headers["Idempotency-Key"],
                    }
                )
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.end_headers()
                self.wfile.write(b'{"ok": true}' if status < 300 else b"try later")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/rollback"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()


@pytest.fixture
def webhook_project(project):
    project.rollback_webhook_url = "http://127.0.0.1:9/unset"
    project.save()
    return project


def test_a_rollback_is_posted_signed_and_retried_until_the_receiver_takes_it(
    client, bob, webhook_project, celery_worker
):
    receiver = Receiver([503, 502, 200], webhooks.webhook_secret(webhook_project))
    webhook_project.rollback_webhook_url = receiver.url
    webhook_project.save()
    try:
        sub = scored_with_artifact(webhook_project, b"ok v1")
        client.force_login(bob)
        response = client.post(
            "/projects/hill/runs/r1/rollback", {"submission": sub.pk, "reason": "score regressed"}
        )
        assert response.status_code == 302
        wait_for(lambda: Rollback.objects.get().status == "applied")
    finally:
        receiver.stop()
    rollback = Rollback.objects.get()
    assert rollback.attempts == 3
    assert [s["valid"] for s in receiver.seen] == [True, True, True]
    assert {s["key"] for s in receiver.seen} == {f"smrweb-rollback-{rollback.pk}"}
    body = receiver.seen[0]["body"]
    assert body["target"]["type"] == "submission" and body["target"]["id"] == sub.pk
    assert (
        body["target"]["artifact_sha256"] == sub.artifact.blob.sha256 and body["reason"] == "score regressed"
    )
    assert "HTTP 503" in rollback.detail and "retrying" in rollback.detail and "HTTP 200" in rollback.detail


def test_a_rollback_the_receiver_refuses_fails_with_its_answer(bob, webhook_project, celery_worker):
    receiver = Receiver([400], webhooks.webhook_secret(webhook_project))
    webhook_project.rollback_webhook_url = receiver.url
    webhook_project.save()
    try:
        sub = scored_with_artifact(webhook_project, b"ok v1")
        requested = rollbacks.request_rollback(by=bob, reason="r", submission=sub)
        from smrweb.tasks import dispatch_rollback

        dispatch_rollback.delay(requested.rollback.pk)
        wait_for(lambda: Rollback.objects.get().status == "failed")
    finally:
        receiver.stop()
    rollback = Rollback.objects.get()
    assert rollback.attempts == 1 and "HTTP 400" in rollback.detail and "giving up" in rollback.detail


def test_concurrent_rollback_requests_create_one_rollback(bob, alice, webhook_project):
    sub = scored_with_artifact(webhook_project, b"ok v1")

    def ask(user):
        close_old_connections()
        try:
            return rollbacks.request_rollback(by=user, reason="twice", submission=sub).created
        finally:
            close_old_connections()

    with ThreadPoolExecutor(max_workers=4) as pool:
        created = list(pool.map(ask, [bob, alice, bob, alice]))
    assert created.count(True) == 1
    assert Rollback.objects.count() == 1


def test_a_finished_runs_page_polls_while_its_rollback_is_in_flight(client, bob, webhook_project):
    sub = scored_with_artifact(webhook_project, b"ok v1")
    services.ingest_events(webhook_project, "r1", parse_events(b'[{"type": "state", "state": "done"}]'))
    client.force_login(bob)
    assert (
        "hx-trigger"
        not in client.get("/projects/hill/runs/r1/").content.decode().split('id="run-poll"')[1][:400]
    )
    rollbacks.request_rollback(by=bob, reason="r", submission=sub)
    page = client.get("/projects/hill/runs/r1/").content.decode()
    assert 'hx-trigger="every 3s' in page.split('id="run-poll"')[1][:600]


def test_double_clicks_on_the_page_create_one_rollback_and_say_so(client, bob, webhook_project, monkeypatch):
    from smrweb import tasks

    dispatched = []
    monkeypatch.setattr(tasks.dispatch_rollback, "delay_on_commit", dispatched.append)
    sub = scored_with_artifact(webhook_project, b"ok v1")
    client.force_login(bob)
    client.post("/projects/hill/runs/r1/rollback", {"submission": sub.pk})
    second = client.post("/projects/hill/runs/r1/rollback", {"submission": sub.pk}, follow=True)
    assert "already in flight" in second.content.decode()
    assert Rollback.objects.count() == 1
    assert dispatched == [Rollback.objects.get().pk]  # dispatched once


def test_viewers_cannot_roll_back_and_push_projects_need_a_webhook(client, victor, alice, project):
    sub = scored_with_artifact(project, b"ok")
    client.force_login(victor)
    assert client.post("/projects/hill/runs/r1/rollback", {"submission": sub.pk}).status_code == 403
    client.force_login(alice)
    page = client.post(
        "/projects/hill/runs/r1/rollback", {"submission": sub.pk}, follow=True
    ).content.decode()
    assert "no webhook URL for its harness" in page
    assert not Rollback.objects.exists()


# --- rollback through the SMR simulator -------------------------------------------------------------------

API_KEY, SMR_PROJECT = "rollback-key", "smr-rollback"


@pytest.fixture
def simulator(start_sim):
    return start_sim(api_key=API_KEY, project_ids=[SMR_PROJECT], runs=3, tick=0.1, seed=11, warmup=80)


def test_rolling_back_an_smr_run_restores_the_checkpoint_in_the_backend(
    client, alice, bob, simulator, celery_worker
):
    scenario = services.create_scenario(key="rb", name="rb", score_metric="val_loss", direction="minimize")
    project = admin_project(
        "smr-rb",
        scenario=scenario,
        source="smr",
        smr_project_id=SMR_PROJECT,
        smr_backend_base=simulator.url,
        smr_api_key=API_KEY,
        by=alice,
    )
    services.add_member(project, bob, role="reviewer")
    sync.sync_project(project, owner="test")
    checkpoint = Checkpoint.objects.filter(run__project=project, restorable=True, failure_reason="").first()
    assert checkpoint is not None, "the simulated world should have taken a restorable checkpoint by now"
    run = checkpoint.run
    client.force_login(bob)
    client.post(
        f"/projects/smr-rb/runs/{run.external_id}/rollback",
        {"checkpoint": checkpoint.pk, "reason": "regressed"},
    )
    # SMR answers a restore with state "accepted": taken, not confirmed done, and the page says which.
    wait_for(lambda: Rollback.objects.get().status == "accepted")
    assert "SMR accepted the restore of checkpoint" in Rollback.objects.get().detail
    world = httpx.get(f"{simulator.url}/_sim/state").json()
    [truth] = [r for r in world["projects"][SMR_PROJECT]["runs"] if r["run_id"] == run.external_id]
    assert [(r["checkpoint_id"], r["reason"]) for r in truth["restores"]] == [
        (checkpoint.external_id, "regressed")
    ]
    assert Run.objects.get(pk=run.pk).rollbacks.get().detail.endswith(".")
