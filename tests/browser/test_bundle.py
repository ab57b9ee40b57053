"""A submission's reproducibility bundle in a real browser (issue 39 item 4): Download bundle saves the
signed tar.gz, Copy bundle link copies a link that downloads the same bundle in a browser with no session;
screenshots of the Artifact card at 1440 and 390 px, light and dark."""

from __future__ import annotations

import io
import json

import pytest
from playwright.sync_api import expect

from smrweb.core import bundles
from smrweb.sources import bundles as server_bundles
from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import Submission
from smrweb.tracking.services import submissions as lifecycle
from tests.browser.test_screenshots import WIDTHS_AND_SCHEMES, page_at

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

OPTIMIZER = b"class Optimizer:\n    def step(self):\n        pass\n"


def verified(project) -> Submission:
    artifact, _ = services.store_artifact(
        project, "run-bundle", path="submission/optimizer.py", content=io.BytesIO(OPTIMIZER)
    )
    services.ingest_events(
        project,
        "run-bundle",
        parse_events(json.dumps([{"type": "score", "score": 0.42, "artifact": artifact.blob.sha256}])),
    )
    sub = Submission.objects.filter(project=project).order_by("-id").first()
    lifecycle.request_verification(sub, by=None, automatic=True)
    return lifecycle.record_verification(
        sub.pk, lifecycle.VerificationResult("passed", 0, "valid: optimizer.py", "exited 0")
    )


def test_download_and_copy_the_bundle_link_that_works_without_signing_in(
    browser, page, context, live_server, sign_in, victor, project, tmp_path
):
    sub = verified(project)
    sign_in(victor)  # a viewer reads the submission, so its bundle too
    page.goto(f"/projects/hill/submissions/{sub.pk}/")
    card = page.locator("#artifact [data-bundle]")
    with page.expect_download() as download:
        card.get_by_role("link", name="Download bundle").click()
    saved = tmp_path / download.value.suggested_filename
    download.value.save_as(saved)
    assert saved.name == f"smrweb-bundle-hill-{sub.pk}.tar.gz"
    key = server_bundles.signing_key().public_key()
    opened = bundles.open_bundle(saved, [key], tmp_path / "opened")
    assert opened.manifest["claimed_score"] == 0.42
    assert opened.file("artifact/optimizer.py").read_bytes() == OPTIMIZER

    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    copy = card.locator('[data-copy-label="bundle link"]')
    expect(copy).to_have_text("Copy bundle link")
    copy.click()
    expect(copy).to_have_text("Copied")
    expect(page.locator("#announcer")).to_have_text("Copied the bundle link to the clipboard.")
    link = page.evaluate("navigator.clipboard.readText()")
    assert link.startswith(live_server.url + "/b/")

    # A stranger's browser (no cookies) gets the same bundle through the link.
    stranger = browser.new_context(accept_downloads=True)
    try:
        response = stranger.request.get(link)
        assert response.status == 200 and response.headers["content-type"] == "application/gzip"
        assert response.body() == saved.read_bytes()
    finally:
        stranger.close()


def test_screenshots_of_the_bundle_actions(browser, live_server, alice, project, screenshot_dir):
    sub = verified(project)
    for width, scheme in WIDTHS_AND_SCHEMES:
        suffix = f"{width}" if scheme == "light" else f"{width}-dark"
        with page_at(browser, live_server, alice, width, scheme) as page:
            page.goto(f"/projects/hill/submissions/{sub.pk}/")
            card = page.locator("#artifact")
            expect(card.get_by_role("link", name="Download bundle")).to_be_visible()
            width_px = page.evaluate("document.documentElement.scrollWidth")
            assert width_px <= width + 1, f"the page scrolls sideways at {width}: {width_px}px"
            card.screenshot(path=screenshot_dir / f"submission-bundle-card-{suffix}.png")
            page.screenshot(path=screenshot_dir / f"submission-bundle-page-{suffix}.png", full_page=True)
