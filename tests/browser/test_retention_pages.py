"""The delete confirmation and the retention preview in Chromium, at desktop and phone widths: they
render their counts, fit the width, and a typed confirmation deletes. Screenshots go to screenshots/
(gitignored) for people to look at."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from smrweb.tracking import services
from smrweb.tracking.models import Run
from tests.tracking.retention_helpers import finished_run, upload

pytestmark = pytest.mark.django_db(transaction=True)

WIDTHS = {"desktop": 1440, "phone": 390}


WIDER = """() => [...document.querySelectorAll('body *')]
    .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1)
    .slice(0, 5).map(e => e.tagName + '.' + e.className)"""


def _fits(page) -> list[str]:
    """What sticks out past the right edge (empty: the page fits its width)."""
    if page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"):
        return []
    return page.evaluate(WIDER) or ["the page scrolls sideways"]


@pytest.fixture
def seeded(alice):
    from tests.factories import admin_project

    project = admin_project("hill", name="Hill climb", by=alice)
    for i in range(3):
        run = finished_run(project, f"old-{i}", points=400, turns=5)
        Run.objects.filter(pk=run.pk).update(finished_at=timezone.now() - timedelta(days=120))
        upload(project, f"old-{i}", f"weights {i} ".encode() * 500, "model.bin")
    gone = finished_run(project, "archived-long-ago", points=50)
    services.archive_run(gone, by=alice)
    Run.objects.filter(pk=gone.pk).update(archived_at=timezone.now() - timedelta(days=60))
    project.retention_metric_days, project.retention_keep_points, project.retention_archived_run_days = (
        90,
        100,
        30,
    )
    project.save()
    return project


def test_delete_confirmation_and_retention_preview(page, sign_in, alice, seeded, screenshot_dir):
    sign_in(alice)
    for name, width in WIDTHS.items():
        page.set_viewport_size({"width": width, "height": 900})
        page.goto("/projects/hill/retention/")
        preview = page.locator("#retention-preview")
        assert "1,200" not in preview.inner_text()  # plain counts, no locale separators mixed in
        dry = services.apply_retention(seeded, dry_run=True)
        assert preview.locator('[data-preview="points"]').inner_text().startswith(str(dry.points_removed))
        assert preview.locator('[data-preview="runs"]').inner_text() == "1"
        assert not _fits(page), f"retention page overflows at {width}px: {_fits(page)}"
        page.screenshot(path=screenshot_dir / f"retention-preview-{name}.png", full_page=True)

        page.goto("/projects/hill/runs/old-0/delete")
        assert page.locator('[data-count="metric_points"]').inner_text() == "400"
        assert not _fits(page), f"delete page overflows at {width}px: {_fits(page)}"
        page.screenshot(path=screenshot_dir / f"delete-run-{name}.png", full_page=True)
        page.goto("/projects/hill/delete")
        assert page.locator('[data-count="runs"]').inner_text() == "4"
        page.screenshot(path=screenshot_dir / f"delete-project-{name}.png", full_page=True)

    page.goto("/projects/hill/runs/old-0/delete")
    page.fill("#id_confirm", "old-0")
    page.click("button.danger")
    page.wait_for_url("**/projects/hill/")
    assert "old-0 is deleted" in page.locator("body").inner_text()
    assert not Run.objects.filter(external_id="old-0").exists()
