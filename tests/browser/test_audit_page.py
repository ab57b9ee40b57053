"""The audit log in a real browser: an admin opens it from the project's admin tabs, narrows it by kind and
person, pages to older actions, and downloads the filtered log as CSV with the Export button; the run
page's turns export downloads too. Screenshots go to /tmp/audit-shots/ (and screenshots/)."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta
from pathlib import Path

import pytest
import time_machine
from django.utils import timezone
from playwright.sync_api import expect

from smrweb.tracking import services
from smrweb.tracking.models import Project, Run
from tests.browser.conftest import push, score, state, turn

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SHOTS = Path("/tmp/audit-shots")


def shoot(page, screenshot_dir, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.evaluate("window.scrollTo(0, 0)")  # the sticky bar belongs on top of a full-page shot
    for folder in (SHOTS, screenshot_dir):
        page.screenshot(path=folder / f"{name}.png", full_page=True)


def test_an_admin_reads_filters_pages_and_exports_the_audit_log(
    page, sign_in, alice, bob, project, screenshot_dir
):
    push(project, "r1", state("running"), turn(1), turn(2), score(0.4))
    # A push run is stopped through the project's webhook (set without an audit row of its own).
    Project.objects.filter(pk=project.pk).update(rollback_webhook_url="https://hooks.example/hill")
    run = Run.objects.get(project=project, external_id="r1")
    earlier = timezone.now() - timedelta(days=2)
    with time_machine.travel(earlier, tick=False):
        for i in range(55):
            services.update_project(project, regression_threshold=0.01 * (i + 1), by=alice)
    token, _ = services.create_api_token(project, name="ci-harness", by=alice)
    services.revoke_api_token(token, by=alice)
    services.request_stop(run, by=bob)
    services.set_tag(run, key="baseline", by=bob)
    sign_in(alice)

    page.goto("/projects/hill/settings/")
    page.get_by_role("link", name="Audit log", exact=True).click()
    expect(page).to_have_url(re.compile(r"/projects/hill/audit/$"))
    expect(page.locator("h1")).to_have_text("Audit log")
    rows = page.locator("table.audit tbody tr")
    expect(rows).to_have_count(50)
    expect(rows.first).to_contain_text("bob")
    expect(rows.first).to_contain_text("Run tagged")
    expect(rows.first.get_by_role("link", name="run r1")).to_have_attribute("href", "/projects/hill/runs/r1/")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"] + 1, f"the page scrolls sideways: {width}px"
    shoot(page, screenshot_dir, "audit-log")

    # Older actions on the next page.
    page.get_by_role("link", name="older →").click()
    expect(page.locator("nav.pager")).to_contain_text("page 2 of 2")

    # Narrow it: alice's token actions.
    page.goto("/projects/hill/audit/")
    page.select_option("select[name=kind]", "token")
    page.select_option("select[name=actor]", "alice")
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("Token revoked")
    expect(rows.nth(1)).to_contain_text("Token created")
    expect(rows.nth(1)).to_contain_text("name: ci-harness")
    shoot(page, screenshot_dir, "audit-log-filtered")

    with page.expect_download() as info:
        page.get_by_role("link", name="Export CSV").click()
    download = info.value
    assert re.fullmatch(r"hill-audit-\d{8}\.csv", download.suggested_filename)
    exported = list(csv.DictReader(io.StringIO(Path(download.path()).read_text())))
    assert [r["verb"] for r in exported] == ["token.revoked", "token.created"]

    # The project page's export buttons fit their cards' heads.
    page.goto("/projects/hill/")
    expect(page.locator('[data-export="runs"]').get_by_role("link", name="Export CSV")).to_be_visible()
    expect(page.locator('[data-export="the leaderboard"]').get_by_role("link", name="JSONL")).to_be_visible()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"] + 1, f"the project page scrolls sideways: {width}px"
    shoot(page, screenshot_dir, "project-exports")

    # The run page's turns export, as a download too.
    page.goto("/projects/hill/runs/r1/")
    with page.expect_download() as info:
        page.locator('[data-export="every turn"]').get_by_role("link", name="Export CSV").click()
    turns = list(csv.DictReader(io.StringIO(Path(info.value.path()).read_text())))
    assert [t["turn"] for t in turns] == ["1", "2"]
    shoot(page, screenshot_dir, "run-exports")
