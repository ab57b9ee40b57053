"""The demo harness's rollback webhook against a live server: a signed rollback is applied once and
reported back as a runtime message; a forged one is refused, and the rollback fails with that answer."""

from __future__ import annotations

import io
import json
import threading
from http.server import ThreadingHTTPServer

import pytest

from smrweb.outbound import dispatch, webhooks
from smrweb.stack.rollback_receiver import make_handler
from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import RuntimeMessage, Submission
from smrweb.tracking.services import rollbacks

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def receiver(project, token, live_server):
    def start(secret: str):
        server = ThreadingHTTPServer(
            ("127.0.0.1", 0),
            make_handler(url=live_server.url, tokens={"hill": token}, secrets={"hill": secret}),
        )
        threading.Thread(target=server.serve_forever, daemon=True).start()
        project.rollback_webhook_url = f"http://127.0.0.1:{server.server_port}/rollback"
        project.save()
        servers.append(server)

    servers: list = []
    yield start
    for server in servers:
        server.shutdown()


def candidate(project) -> Submission:
    artifact, _ = services.store_artifact(
        project, "r1", path="submission/optimizer.py", content=io.BytesIO(b"v1")
    )
    services.ingest_events(
        project,
        "r1",
        parse_events(json.dumps([{"type": "score", "score": 0.9, "artifact": artifact.blob.sha256}])),
    )
    return Submission.objects.get()


def test_a_signed_rollback_is_applied_and_reported_back(project, bob, receiver):
    receiver(webhooks.webhook_secret(project))
    sub = candidate(project)
    rollback = rollbacks.request_rollback(by=bob, reason="regressed by 0.3", submission=sub).rollback
    assert dispatch.dispatch_rollback(rollback.pk, last_try=True).outcome == "applied"
    message = RuntimeMessage.objects.get(run__external_id="r1", topic="harness.rollback")
    assert f"Rolled back to submission #{sub.pk}" in message.body and "regressed by 0.3" in message.body
    rollback.refresh_from_db()
    assert rollback.status == "applied" and rollback.detail.endswith("the webhook answered HTTP 200")


def test_a_rollback_signed_with_the_wrong_secret_is_refused(project, bob, receiver):
    receiver("not-the-projects-secret")
    rollback = rollbacks.request_rollback(by=bob, reason="r", submission=candidate(project)).rollback
    assert dispatch.dispatch_rollback(rollback.pk, last_try=False).outcome == "failed"  # 401 is not retried
    rollback.refresh_from_db()
    assert rollback.status == "failed" and "HTTP 401" in rollback.detail
    assert not RuntimeMessage.objects.filter(topic="harness.rollback").exists()
