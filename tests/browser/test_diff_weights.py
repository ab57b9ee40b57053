"""Issue 33 P1-A replayed in Chromium, step by step: two ONNX submissions of one graph with other weights
(the walkthrough's #1523 and #1516: same size, other sha256 and score). The reviewer opens the newer,
picks "Compare with" the older, waits while the real worker summarises the models and compares their
weights, and reads "same structure, weights differ" with the figures, never "no changes". Then P3: an
older submission is picked by typing its number. Screenshots of the diff at 1440 and 390 px, light and
dark, with the screenshot suite's layout and dark-mode checks."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from smrweb.tracking.models import SubmissionStatus as S
from tests.browser.test_screenshots import DARK_CHECK, OVERFLOW_CHECK, WIDTHS_AND_SCHEMES, page_at
from tests.review.helpers import submit
from tests.review.test_onnx_on_a_worker import retrained_pair

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PATH, KIND = "submission/policy.onnx", "onnx_model"
WORKER_MS = 60_000  # the first summaries start the worker's subprocesses: generous, not a benchmark


def test_an_onnx_diff_of_other_weights_says_weights_differ(
    celery_worker, browser, live_server, bob, project, screenshot_dir
):
    old_bytes, new_bytes, expected = retrained_pair()
    older = submit(project, retrained_pair(seed=9)[1], score=1100, path=PATH, kind=KIND, run="r-old")
    old = submit(project, old_bytes, score=1209, path=PATH, kind=KIND, run="r0", status=S.VERIFIED)
    new = submit(project, new_bytes, score=1218, path=PATH, kind=KIND, run="r1", status=S.VERIFIED)
    sha_old, sha_new = old.artifact.blob.sha256, new.artifact.blob.sha256

    problems: dict[str, list[str]] = {}
    for width, scheme in WIDTHS_AND_SCHEMES:
        phone = width < 600
        with page_at(browser, live_server, bob, width, scheme) as page:
            errors: list[str] = []
            page.on("pageerror", lambda exc, errors=errors: errors.append(str(exc)))
            # 1. The newer submission's page; 2. "Compare with" the older one.
            page.goto(f"/projects/hill/submissions/{new.pk}/")
            changes = page.locator("#changes")
            expect(changes.locator("[data-diff-against]")).to_be_visible()
            # Picked once htmx has taken the fragment in (it marks new content htmx-added until it has): a
            # pick in between goes nowhere, and the page's own comparison (the project's best) stays.
            expect(changes.locator("[data-diff]")).not_to_have_class(re.compile(r"\bhtmx-added\b"))
            changes.locator("[data-diff-against]").select_option(str(old.pk))
            # 3. The worker summarises and compares (the fragment polls), 4. the verdict.
            summary = changes.locator(".diff-summary")
            expect(summary).to_contain_text(f"submission #{old.pk}", timeout=WORKER_MS)
            expect(summary).to_contain_text(
                f"same structure, weights differ (sha256 {sha_old[:8]}… vs {sha_new[:8]}…)", timeout=WORKER_MS
            )
            expect(changes).not_to_contain_text("no changes")
            expect(changes.locator("[data-diff-identical]")).to_have_count(0)
            weights = changes.locator("[data-weights=done]")
            expect(weights.locator("[data-parameters-changed]")).to_have_attribute(
                "data-parameters-changed", str(expected["parameters_changed"])
            )
            expect(weights.locator("[data-tensors-changed]")).to_contain_text("2 of 4")
            expect(weights.locator("[data-max-change]")).to_have_text(f"{expected['max_abs_change']:.3g}")
            expect(weights.locator("[data-mean-change]")).to_have_text(f"{expected['mean_abs_change']:.3g}")
            expect(weights.locator("tr[data-tensor]").first).to_have_attribute("data-tensor", "b2")
            suffix = f"{width}" if scheme == "light" else f"{width}-dark"
            page.screenshot(
                path=str(screenshot_dir / f"submission-onnx-weights-diff-{suffix}.png"), full_page=True
            )
            found = page.evaluate(OVERFLOW_CHECK, phone)
            if scheme == "dark":
                found += page.evaluate(DARK_CHECK)
            if found:
                problems[suffix] = found
            # P3: a submission picked by its number, not from the list.
            changes.locator("[data-diff-against-number]").fill(str(older.pk))
            changes.locator("[data-diff-against-number]").press("Enter")
            expect(changes.locator(".diff-summary")).to_contain_text(
                f"submission #{older.pk}", timeout=WORKER_MS
            )
            expect(changes.locator(".diff-summary")).to_contain_text("weights differ")
            expect(changes.locator("[data-diff-against] option:checked")).to_have_attribute(
                "value", str(older.pk)
            )
            assert not errors, f"JavaScript errors on the page: {errors}"
    assert not problems, "\n".join(f"{shot}: {msg}" for shot, msgs in problems.items() for msg in msgs)
