"""The loop in a real browser with a real worker and the demo harness's webhook receiver: from the
knowledge page, a reviewer opens the form prefilled with the carry-forward block, adds a line and starts
the run; the worker sends the signed start webhook, the harness starts the run under the id smrweb chose
and pushes its events through the API; the launch page shows it confirmed and climbing, the run page
says where it came from. Then the reviewer steers that run — a message the agent acknowledges, pause,
resume — and "Start another like this" starts the one after it."""

from __future__ import annotations

import re
import threading
from http.server import ThreadingHTTPServer

import pytest
from playwright.sync_api import expect

from smrweb.outbound import webhooks
from smrweb.stack.rollback_receiver import make_handler
from smrweb.tracking import services
from smrweb.tracking.models import Run, RunLaunch
from smrweb.tracking.services import knowledge
from tests.browser.conftest import push, score, state
from tests.conftest import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]
WAIT_MS = 30_000


@pytest.fixture
def harness(project, token, live_server, tmp_path):
    """The demo harness's webhook receiver, reporting to the live server with the project's token; the
    runs it starts read their steering from an inbox, as the demo's do."""
    server = ThreadingHTTPServer(
        ("127.0.0.1", 0),
        make_handler(
            url=live_server.url,
            tokens={"hill": token},
            secrets={"hill": webhooks.webhook_secret(project)},
            inbox=tmp_path / "inbox",
            interval=0.5,  # a run lives 30–45 s: long enough to be steered
        ),
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    services.update_project(project, rollback_webhook_url=f"http://127.0.0.1:{server.server_port}/rollback")
    yield server
    # The runs it started stop being stepped (a step under way ends) before the database is flushed: a push
    # meeting the flush deadlocked it once (CI, PostgreSQL).
    server.RequestHandlerClass.stop_harness()
    server.shutdown()


def best_of(text: str) -> float:
    return float(re.sub(r"[^0-9.]", "", text) or "nan")


def test_start_the_next_run_from_the_knowledge_page_and_again_from_the_new_run(
    page, sign_in, bob, project, harness, celery_worker, screenshot_dir
):
    push(
        project,
        "r1",
        state("running"),
        score(0.31),
        score(0.42),
        state("failed", family="oom", detail="killed"),
    )
    knowledge.add_entry(
        project, by=bob, kind="failed_approach", title="Batch of 4096", body="ran out of memory"
    )
    sign_in(bob)

    # The knowledge page offers the block and the way to start the next run with it.
    page.goto("/projects/hill/knowledge/")
    page.get_by_role("link", name="Start the next run with this").click()
    expect(page.locator("h1")).to_have_text("Start the next run")
    expect(page.locator("[data-launch-from]")).to_contain_text("started from r1")
    block = page.locator("#id_carry_forward")
    expect(block).to_have_value(re.compile(r"^## Carry-forward: hill \(maximize score\)"))
    expect(block).to_have_value(re.compile("Batch of 4096"))
    page.fill("#id_text", "Keep the batch at 256 and halve the learning rate.")
    page.screenshot(path=str(screenshot_dir / "next-run-form.png"), full_page=True)
    page.get_by_role("button", name="Start the run").click()

    # The launch page follows the worker and the harness by itself: confirmed, then the run climbs.
    expect(page.locator(".alert.good")).to_contain_text("Launch requested")
    expect(page.locator("[data-launch-status]")).to_have_text("confirmed", timeout=WAIT_MS)
    new_run = page.locator("[data-new-run]")
    expect(new_run).to_have_attribute("data-new-run", "r1-next-1")
    best = page.locator("[data-new-run-best]")
    expect(best).not_to_have_text("—", timeout=WAIT_MS)
    first_best = best_of(best.inner_text())
    wait_for(lambda: best_of(best.inner_text()) > first_best, timeout=60)  # it climbs, and the page shows it
    page.screenshot(path=str(screenshot_dir / "next-run-launch.png"), full_page=True)

    # The new run's page: where it came from, its kickoff (the block, then the line), and the way on.
    new_run.get_by_role("link", name="r1-next-1").click()
    expect(page.locator("[data-lineage-parent]")).to_contain_text("started from r1")
    expect(page.locator("li.kickoff .body")).to_contain_text(
        "## Carry-forward: hill"
    )  # (cut at 300 characters)
    launch = RunLaunch.objects.get()
    assert launch.run.parent.external_id == "r1" and launch.kickoff.startswith("## Carry-forward: hill")
    assert launch.kickoff.endswith("Keep the batch at 256 and halve the learning rate.")

    # Steer it: a message the agent acknowledges, then pause and resume (each through the worker, the
    # signed webhook and the harness's inbox; the page follows the source's reports by itself).
    page.fill("#id_steer_body", "Try cosine decay; keep the batch at 256.")
    page.get_by_role("button", name="Send message").click()
    message = page.locator("[data-control-kind=message]")
    expect(message).to_have_attribute("data-control-status", "confirmed", timeout=WAIT_MS)
    expect(page.locator("#run-live")).to_contain_text("Acknowledged: “Try cosine decay", timeout=WAIT_MS)
    page.get_by_role("button", name="Pause run").click()
    expect(page.get_by_role("button", name="Resume run")).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("h1 .badge-paused")).to_be_visible()
    page.get_by_role("button", name="Resume run").click()
    expect(page.get_by_role("button", name="Pause run")).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("h1 .badge-running")).to_be_visible(timeout=WAIT_MS)
    page.screenshot(path=str(screenshot_dir / "next-run-steered.png"), full_page=True)

    page.get_by_role("link", name="Start another like this").click()
    expect(page.locator("[data-launch-from]")).to_contain_text("started from r1-next-1")
    page.fill("#id_text", "Now try warmup.")
    page.get_by_role("button", name="Start the run").click()
    expect(page.locator("[data-launch-status]")).to_have_text("confirmed", timeout=WAIT_MS)
    expect(page.locator("[data-new-run]")).to_have_attribute("data-new-run", "r1-next-2")

    # Lineage on the parent's page: both of its descendants are a click away.
    page.goto("/projects/hill/runs/r1/")
    expect(page.locator("[data-lineage-children]")).to_contain_text("r1-next-1")
    assert Run.objects.get(external_id="r1-next-2").parent.external_id == "r1-next-1"
    assert RunLaunch.objects.filter(status="confirmed").count() == 2
