"""Golden paths in a real browser: sign in, watch the overview and the runs table update live, filter
runs, read a run's spend and download its artifact, manage tokens, and keep outsiders out.

Data is written through the services, as the REST API and the pollers write it; the page is never
reloaded where the point is that htmx brings the change in by itself."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from smrweb.tracking import services
from smrweb.tracking.models import Run
from tests.browser.conftest import push, score, state, store, turn
from tests.factories import admin_project

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests-only"  # tests.factories.UserFactory
POLL_WAIT_MS = 10_000  # htmx polls every 5 s; allow two periods


def card(page, slug: str):
    return page.locator(f'#project-cards [data-project="{slug}"]')


def rows(page):
    return page.locator("#project-live table.runs tr[data-run]")


def mark_document(page) -> None:
    """Tag the live document; the tag survives htmx swaps and is lost by any reload."""
    page.evaluate("window.__smrwebNoReload = true")


def assert_not_reloaded(page) -> None:
    assert page.evaluate("window.__smrwebNoReload === true"), "the page was reloaded"


# --- (a) sign in -----------------------------------------------------------------------------------


def test_sign_in_leads_to_the_overview_with_best_score_and_sparkline(page, project):
    push(project, "r1", score(0.2), score(0.5), score(0.4))

    page.goto("/")
    expect(page).to_have_url(re.compile(r"/login/\?next=/$"))
    page.fill("#id_username", "alice")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")

    expect(page).to_have_url(re.compile(r"/$"))
    hill = card(page, "hill")
    expect(hill.locator("h2")).to_have_text("Hill climb")
    # Nothing verified yet: no best, the unverified one named beside it (the project's numbers count verified
    # work).
    expect(hill.locator(".big")).to_have_text("—")
    expect(hill.locator("[data-unverified-best]")).to_have_text("0.5 unverified")
    spark = hill.locator("svg.spark")
    expect(spark).to_be_visible()
    # The sparkline reads the headline's rule: none of the three counts yet, so three hollow dots and no
    # line, and its title says it is a window of the newest scores (issue 33).
    expect(spark.locator("circle.spark-void")).to_have_count(3)
    expect(spark.locator("polyline")).to_have_count(0)
    expect(spark.locator("title")).to_have_text(
        "the newest 60 scores of every run, verified ones counted: 3 · 3 not counted (candidate)"
    )
    expect(hill.locator('[data-count="runs"]')).to_have_text("1 run")


def test_wrong_password_shows_a_form_error_and_keeps_the_username(page, alice):
    page.goto("/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "not-the-password")
    page.click("button[type=submit]")

    expect(page.locator(".form-error[role=alert]")).to_contain_text("correct username and password")
    expect(page).to_have_url(re.compile(r"/login/"))
    expect(page.locator("#id_username")).to_have_value("alice")
    expect(page.locator("#id_password")).to_have_value("")


# --- (b) the overview is live ------------------------------------------------------------------------


def test_overview_shows_a_better_score_without_a_reload(page, sign_in, alice, project):
    push(project, "r1", score(0.5))
    sign_in(alice)
    page.goto("/?unverified=1")  # count unverified scores too (remembered for the session)
    best = card(page, "hill").locator(".big")
    expect(best).to_have_text("0.5")
    mark_document(page)

    push(project, "r2", score(0.875))

    expect(best).to_have_text("0.875", timeout=POLL_WAIT_MS)
    expect(card(page, "hill").locator('[data-count="runs"]')).to_have_text("2 runs")
    assert_not_reloaded(page)


# --- (c) the project page --------------------------------------------------------------------------


@pytest.fixture
def runs_in_every_condition(project):
    """good (best 0.9), meh (0.3, on a downgraded model), broken (failed with a reason), quiet (stalled)."""
    push(project, "good", state("running"), score(0.6), score(0.9))
    push(project, "meh", state("running"), score(0.3))
    services.update_run_settings(
        project, "meh", requested_profile="codex_gpt_5_4_medium", actual_profile="codex_gpt_5_4_mini_medium"
    )
    push(
        project,
        "broken",
        state("running"),
        state(
            "failed",
            family="runtime",
            detail="repo_like_task_count_mismatch requested=2 persisted=1",
            source="state_machine_runtime",
        ),
    )
    push(project, "quiet", state("running"), {"type": "metric", "key": "loss", "value": 1.5})
    Run.objects.filter(project=project, external_id="quiet").update(
        last_progress_at=timezone.now() - timedelta(hours=2)
    )  # two hours pass without news
    flagged = services.flag_stalled_runs()
    assert [r.external_id for r in flagged] == ["quiet"]
    return project


def test_project_page_shows_runs_badges_and_leaderboard(page, sign_in, alice, runs_in_every_condition):
    sign_in(alice)
    page.goto("/projects/hill/?unverified=1&board=all")

    expect(rows(page)).to_have_count(4)
    quiet = page.locator('tr[data-run="quiet"]')
    expect(quiet.locator(".badge-running")).to_be_visible()
    stalled = quiet.locator(".badge-stalled")
    expect(stalled).to_have_text("stalled")
    expect(stalled).to_have_attribute("title", re.compile(r"^No progress for 2h"))

    failed = page.locator('tr[data-run="broken"] .badge-failed')
    expect(failed).to_have_text("failed")
    expect(failed).to_have_attribute(
        "title", "runtime · repo_like_task_count_mismatch requested=2 persisted=1"
    )

    downgraded = page.locator('tr[data-run="meh"] .badge-warn')
    expect(downgraded).to_have_text("downgraded")
    expect(downgraded).to_have_attribute(
        "title", "requested codex_gpt_5_4_medium, got codex_gpt_5_4_mini_medium"
    )
    expect(page.locator('tr[data-run="good"] td.num b')).to_have_text("0.9")
    expect(page.locator('tr[data-run="good"] svg.spark')).to_be_visible()

    board = page.locator("table.leaderboard tbody tr")
    expect(board).to_have_count(3)
    expect(board.locator("td.num b")).to_have_text(["0.9", "0.6", "0.3"])  # maximize: highest first
    expect(board.first.locator("a.rid")).to_have_text("good")


def test_leaderboard_of_a_minimize_scenario_puts_the_lowest_score_first(page, sign_in, alice):
    scenario = services.create_scenario(
        key="loss-bench", name="Loss bench", score_metric="val_loss", direction="minimize"
    )
    project = admin_project("lossy", name="Lossy", scenario=scenario, by=alice)
    push(project, "a", score(3.9), score(3.61))
    push(project, "b", score(4.2), score(3.75))
    sign_in(alice)
    page.goto("/projects/lossy/?unverified=1&board=all")

    expect(page.locator("table.leaderboard td.num b")).to_have_text(["3.61", "3.75", "3.9", "4.2"])
    expect(page.locator(".card-head", has_text="Leaderboard")).to_contain_text("lowest val_loss first")
    expect(page.locator('tr[data-run="a"] td.num b')).to_have_text("3.61")  # the run's best is its lowest


def test_filters_narrow_the_runs_table_in_place(page, sign_in, alice, runs_in_every_condition):
    sign_in(alice)
    page.goto("/projects/hill/")
    expect(rows(page)).to_have_count(4)
    mark_document(page)

    page.select_option("select[name=state]", "failed")
    expect(rows(page)).to_have_count(1)
    expect(rows(page).first).to_have_attribute("data-run", "broken")
    expect(page).to_have_url(re.compile(r"state=failed"))
    expect(page.locator("#project-live .card-head", has_text="Runs")).to_contain_text("1 matching")

    page.select_option("select[name=state]", "")
    expect(rows(page)).to_have_count(4)
    page.locator("#runs-filter input[name=q]").press_sequentially("goo", delay=30)
    expect(rows(page)).to_have_count(1)
    expect(rows(page).first).to_have_attribute("data-run", "good")

    page.locator("#runs-filter input[name=q]").fill("")
    page.locator("#runs-filter input[name=q]").press_sequentially(
        "count_mismatch", delay=10
    )  # failure text matches too
    expect(rows(page)).to_have_count(1)
    expect(rows(page).first).to_have_attribute("data-run", "broken")

    page.locator("#runs-filter input[name=q]").fill("")
    page.locator("#runs-filter input[name=q]").press_sequentially("no-such-run", delay=10)
    expect(rows(page)).to_have_count(0)
    expect(page.locator("#project-live table.runs td.empty")).to_have_text("No runs match these filters.")
    assert_not_reloaded(page)


def test_runs_table_shows_a_new_run_without_a_reload(page, sign_in, alice, project):
    push(project, "first", state("running"))
    sign_in(alice)
    page.goto("/projects/hill/?unverified=1")
    expect(rows(page)).to_have_count(1)
    mark_document(page)

    push(project, "second", state("running"), score(0.7))

    expect(page.locator('tr[data-run="second"]')).to_be_visible(timeout=POLL_WAIT_MS)
    expect(rows(page)).to_have_count(2)
    expect(page.locator("table.leaderboard td.num b")).to_have_text(["0.7"])
    assert_not_reloaded(page)


# --- (d) the run page ------------------------------------------------------------------------------


def test_run_page_shows_stats_spend_split_turns_and_downloads_exact_bytes(page, sign_in, alice, project):
    payload = bytes(range(256)) * 8 + b"\x00tail\r\n"  # binary, with NULs and CRLF: bytes must survive as-is
    artifact = store(
        project, "r1", "submission/policy.onnx", payload, content_type="application/octet-stream"
    )
    services.update_run_settings(project, "r1", budget_usd=Decimal("2.00"))
    push(
        project,
        "r1",
        state("running"),
        turn(0, tokens_in=1000, tokens_out=100, cost_usd=0.25, tool_calls=["read_file", "apply_patch"]),
        turn(
            0,
            actor="worker-1",
            parent="driver",
            model="gpt-5.4-mini",
            tokens_in=10,
            tokens_out=5,
            cost_usd=0.5,
        ),
        turn(1, tokens_in=2000, tokens_out=300, cost_usd=0.15),
        score(0.42, artifact=artifact.blob.sha256),
        score(0.61, artifact="submission/policy.onnx"),
    )
    sign_in(alice)
    page.goto("/projects/hill/runs/r1/")

    expect(page.locator("h1")).to_contain_text("r1")
    expect(page.locator("h1 .badge-running")).to_be_visible()
    stat = {
        label: page.locator(".stat", has=page.locator(".label", has_text=label))
        for label in ("best", "spend", "driver inference", "child work", "turns")
    }
    expect(stat["best"].locator(".big")).to_have_text("0.61")
    expect(stat["best"]).to_contain_text("2 scores")
    expect(stat["spend"].locator(".big")).to_have_text("$0.90")
    expect(stat["driver inference"].locator(".big")).to_have_text("$0.40")
    expect(stat["child work"].locator(".big")).to_have_text("$0.50")
    expect(stat["turns"].locator(".big")).to_have_text("3")
    expect(stat["turns"]).to_contain_text("budget used 45%")
    split = page.locator("table.split tbody tr")
    expect(split.nth(2).locator("td.num").last).to_have_text("$0.90")  # total == driver + child
    expect(page.locator(".budget").first).to_have_attribute(
        "aria-label", "USD: driver $0.40 and child $0.50 of $2.00"
    )

    turns = page.locator("table.turns tbody tr")
    expect(turns).to_have_count(3)
    expect(turns.locator(".kind")).to_have_text(["driver", "child", "driver"])
    expect(page.locator("table.turns td", has_text="worker-1")).to_contain_text("← driver")
    expect(page.locator("#run-timeline .main-svg").first).to_be_visible()  # plotly drew the timeline
    figure = json.loads(page.locator("#run-timeline-data").text_content())
    scores = next(t for t in figure["data"] if t["yaxis"] == "y" and t["mode"] == "markers")
    assert scores["y"] == [0.42, 0.61]

    download_link = page.locator("table.artifacts a", has_text="Download")
    expect(download_link).to_have_count(1)
    with page.expect_download() as info:
        download_link.click()
    download = info.value
    assert download.suggested_filename == "policy.onnx"
    with open(download.path(), "rb") as fh:
        assert fh.read() == payload


# --- (e) tokens ------------------------------------------------------------------------------------


def test_admin_creates_a_token_sees_it_once_and_revokes_it(page, sign_in, alice, project):
    sign_in(alice)
    page.goto("/projects/hill/tokens/")
    expect(page.locator("table.tokens td.empty")).to_be_visible()

    page.fill("#id_name", "arena-uploader")
    page.click("button:has-text('Create token')")
    raw = page.locator("#new-token").inner_text().strip()
    assert raw.startswith("smr_") and len(raw) > 30
    assert services.authenticate_token(raw) is not None
    row = page.locator('tr[data-token="arena-uploader"]')
    expect(row.locator("code")).to_have_text(raw[:10] + "…")

    page.goto("/projects/hill/tokens/")  # shown once: a fresh view never has it
    expect(page.locator("#new-token")).to_have_count(0)
    assert raw not in page.content()

    page.once("dialog", lambda dialog: dialog.accept())  # "Revoke the token …?"
    row.locator("button", has_text="Revoke").click()
    expect(row.locator(".badge-revoked")).to_contain_text("revoked")
    expect(row.locator("button", has_text="Revoke")).to_have_count(0)
    assert services.authenticate_token(raw) is None


def test_dismissing_the_revoke_confirmation_keeps_the_token(page, sign_in, alice, project):
    _, raw = services.create_api_token(project, name="ci")
    sign_in(alice)
    page.goto("/projects/hill/tokens/")
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.locator('tr[data-token="ci"] button', has_text="Revoke").click()
    expect(page.locator('tr[data-token="ci"] button', has_text="Revoke")).to_be_visible()
    assert services.authenticate_token(raw) is not None


# --- (f) outsiders ---------------------------------------------------------------------------------


def test_an_outsider_gets_404_on_the_project_and_its_runs(page, sign_in, carol, project):
    push(project, "r1", score(0.5))
    sign_in(carol)

    response = page.goto("/projects/hill/")
    assert response.status == 404
    expect(page.locator("h1")).to_have_text("Not found")
    assert page.goto("/projects/hill/runs/r1/").status == 404
    assert page.goto("/projects/hill/tokens/").status == 404
    page.goto("/")
    expect(card(page, "hill")).to_have_count(0)
    expect(page.locator(".empty-state h2")).to_have_text("No projects yet")
