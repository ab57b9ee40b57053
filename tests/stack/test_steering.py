"""The demo answers steering: its webhook receiver checks smrweb's signed message, pause and resume and leaves
them in the harness's inbox; the harness, at its next tick, reports the message back (confirming it) with the
agent's reply, stops taking turns and reports `paused`, then `running` again — all through the REST API of a
live server, as a team's harness would. A run the harness does not drive is refused (409)."""

from __future__ import annotations

import random
import threading
import time
from http.server import ThreadingHTTPServer

import httpx
import pytest

from smrweb.outbound import dispatch, webhooks
from smrweb.stack import steering
from smrweb.stack.harness import Harness, SimRun
from smrweb.stack.rollback_receiver import make_handler
from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import Run, RunControl, RuntimeMessage

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def demo(project, token, live_server, tmp_path):
    """The receiver (on a port of its own, the project's webhook) and a harness driving run r1."""
    inbox = steering.inbox_dir(tmp_path / "demo-tokens")
    server = ThreadingHTTPServer(
        ("127.0.0.1", 0),
        make_handler(
            url=live_server.url,
            tokens={"hill": token},
            secrets={"hill": webhooks.webhook_secret(project)},
            inbox=inbox,
        ),
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    project.rollback_webhook_url = f"http://127.0.0.1:{server.server_port}/webhook"
    project.save()
    services.ingest_events(project, "r1", parse_events(b'[{"type": "state", "state": "running"}]'))
    harness = Harness(live_server.url, {"hill": token}, random.Random(1), inbox)
    run = SimRun({"slug": "hill"}, token, "r1", "done", length=50)
    steering.open_inbox(inbox, "hill", "r1")
    yield harness, run, inbox
    server.shutdown()


def sent(control) -> str:
    return dispatch.dispatch_control(control.pk, last_try=True).outcome


def r1() -> Run:
    return Run.objects.get(external_id="r1")


def test_a_message_reaches_the_agent_which_reports_it_back_and_replies(demo, bob):
    harness, run, inbox = demo
    control = services.request_control(r1(), by=bob, kind="message", body="Try cosine decay.")
    assert sent(control) == "accepted"
    assert RunControl.objects.get().detail.endswith("the webhook answered HTTP 202")
    assert harness.steer(run) is True  # the harness's next tick
    control.refresh_from_db()
    assert control.status == "confirmed"
    echo = RuntimeMessage.objects.get(event_id=control.idempotency_key)
    reply = RuntimeMessage.objects.get(event_id=f"{control.idempotency_key}:reply")
    assert (echo.body, echo.topic, echo.target) == ("Try cosine decay.", "smrweb.steer", "role:orchestrator")
    assert (
        reply.body == "Acknowledged: “Try cosine decay.”. Adjusting the plan accordingly."
        and reply.seq > echo.seq
    )
    assert steering.take_messages(inbox, "hill", "r1") == []  # taken once


def test_pause_stops_the_turns_and_resume_starts_them_again(demo, alice):
    harness, run, _ = demo
    pause = services.request_control(r1(), by=alice, kind="pause")
    assert sent(pause) == "accepted"
    assert harness.steer(run) is False and run.paused
    assert r1().state == "paused" and RunControl.objects.get(pk=pause.pk).status == "confirmed"
    states = r1().state_changes.count()
    assert harness.steer(run) is False  # still paused: no turns, nothing reported twice
    assert r1().state_changes.count() == states
    resume = services.request_control(r1(), by=alice, kind="resume")
    assert sent(resume) == "accepted"
    assert harness.steer(run) is True and not run.paused
    assert r1().state == "running" and RunControl.objects.get(pk=resume.pk).status == "confirmed"


def test_a_run_the_harness_no_longer_drives_is_refused(demo, bob):
    _, _, inbox = demo
    steering.close_inbox(inbox, "hill", "r1")  # it ended, or went silent
    control = services.request_control(r1(), by=bob, kind="pause")
    assert sent(control) == "failed"
    assert "the webhook answered HTTP 409" in RunControl.objects.get().detail


def test_the_receiver_refuses_what_smrweb_did_not_sign(demo, project):
    _, _, inbox = demo
    body = b'{"type": "smrweb.pause", "project": "hill", "run": "r1"}'
    forged = {"X-Smrweb-Timestamp": str(int(time.time())), "X-Smrweb-Signature": "sha256=" + "0" * 64}
    answer = httpx.post(project.rollback_webhook_url, content=body, headers=forged)
    assert answer.status_code == 401
    assert not (inbox / "hill--r1" / "paused").exists()


def test_paths_from_a_payload_never_leave_the_inbox(tmp_path):
    inbox = tmp_path / "inbox"
    for project, run in (("..", "r1"), ("hill", "../../etc"), ("hill", "a/b"), ("", "r1")):
        assert steering.run_dir(inbox, project, run) is None
        assert steering.deliver({"type": "smrweb.pause", "project": project, "run": run}, inbox)[0] == 400


def test_a_harness_starting_again_refuses_the_runs_an_earlier_one_drove(tmp_path):
    inbox = steering.inbox_dir(tmp_path / "demo-tokens")
    steering.open_inbox(inbox, "hill", "old-run")  # the earlier harness was killed while driving it
    assert steering.deliver({"type": "smrweb.pause", "project": "hill", "run": "old-run"}, inbox)[0] == 202
    steering.reset_inbox(inbox)
    status, text = steering.deliver({"type": "smrweb.pause", "project": "hill", "run": "old-run"}, inbox)
    assert (status, text) == (409, "this harness does not drive run old-run (it ended or went silent)")
