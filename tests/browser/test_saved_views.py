"""The runs table shaped in the browser (issue 38 item 3): columns added from the columns bar, sorted by a
click on their header, moved and removed, the runs grouped by a tag, a filter changed afterwards (the
columns stay), the table saved as a shared view from the address bar as htmx left it, and the view opened
afresh as the same table; screenshots at 1440 light and 390 dark."""

from __future__ import annotations

import re
from urllib.parse import parse_qs

import pytest
from playwright.sync_api import expect

from smrweb.tracking import services
from smrweb.tracking.models import Run, SavedView
from tests.browser.conftest import push, score, state, turn
from tests.browser.test_screenshots import DARK_CHECK, OVERFLOW_CHECK, page_at

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PAGE = "/projects/hill/"
# run id: (lr, model, failed); lr read as numbers sorts 0.003 < 0.03 < 0.1 < 0.5 < 2 < 9 < 10 < 30
RUNS = {
    "sweep-a": ("0.1", "sonnet", False),
    "sweep-b": ("0.03", "gpt-5", False),
    "sweep-c": ("10", "sonnet", True),
    "sweep-d": ("9", "gpt-5", False),
    "sweep-e": ("0.5", "sonnet", False),
    "sweep-f": ("2", "gpt-5", True),
    "sweep-g": ("0.003", "sonnet", False),
    "sweep-h": ("30", "gpt-5", False),
}
BY_LR = sorted(RUNS, key=lambda r: float(RUNS[r][0]))
FINAL = ["metric:val/loss:min", "param:lr", "tag:model", "spend:child_usd"]

# The columns bar and the saved views bar stay inside the page (and the runs card) at any width.
BARS_FIT = """() => {
  const bad = [];
  const vw = document.documentElement.clientWidth;
  if (document.documentElement.scrollWidth > vw + 1) bad.push('the page scrolls sideways');
  const card = document.querySelector('#project-live .card').getBoundingClientRect();
  for (const el of document.querySelectorAll('[data-run-columns] *, [data-saved-views] *')) {
    const r = el.getBoundingClientRect();
    if (!r.width) continue;
    const what = `${el.tagName}.${el.className} "${el.textContent.trim().slice(0, 30)}"`;
    if (r.right > vw + 1) bad.push(`${what} ends at ${Math.round(r.right)} > ${vw}`);
    if (el.closest('[data-run-columns]') && r.right > card.right + 1) bad.push(`${what} overflows the card`);
  }
  return bad;
}"""


def seed(project, alice) -> None:
    """Eight runs: an lr param, a model tag, a val/loss metric, driver and child turns, scores; two failed."""
    for i, (run_id, (lr, model, failed)) in enumerate(RUNS.items()):
        events = [state("running")]
        events += [turn(n, cost_usd=0.02 * (i + 1)) for n in (1, 2)]
        events += [turn(3, actor="worker-1", parent="driver", model="gpt-5.4-mini", cost_usd=0.01 * (i + 1))]
        events += [
            {"type": "metric", "key": "val/loss", "step": s, "value": round((i + 1) / (s + 2), 4)}
            for s in range(3)
        ]
        events += [score(0.1 * i), score(0.1 * i + 0.05)]
        if failed:
            events.append(state("failed", family="oom", detail="CUDA out of memory at step 812"))
        push(project, run_id, *events)
        run = Run.objects.get(project=project, external_id=run_id)
        services.log_params(run, [("lr", lr)], by=alice)
        services.set_tag(run, key="model", value=model, by=alice)


def rows(page):
    return page.locator("#project-live table.runs tr[data-run]")


def run_ids(page) -> list[str]:
    return rows(page).evaluate_all("rows => rows.map(r => r.dataset.run)")


def cells(page, spec: str) -> list[str]:
    return page.locator(f'#project-live td[data-col="{spec}"]').all_inner_texts()


def headers(page) -> list[str]:
    return page.locator("#project-live table.runs th.col-chosen").evaluate_all(
        "ths => ths.map(th => th.dataset.sortKey.slice(4))"
    )


def chips(page):
    return page.locator("#run-columns [data-col-chip]")


def bar_loaded(page, specs: list[str]) -> None:
    """The columns bar (loaded after the block) is there with these chips, its menu ready."""
    expect(page.locator("form[data-add-column] select#add-column")).to_be_attached()
    expect(chips(page)).to_have_count(len(specs))
    assert chips(page).evaluate_all("cs => cs.map(c => c.dataset.colChip)") == specs


def add_column(page, spec: str, specs: list[str]) -> None:
    page.select_option("#add-column", spec)
    page.locator("form[data-add-column] button").click()
    expect(page.locator(f'#project-live th[data-sort-key="col:{spec}"]')).to_be_visible()
    bar_loaded(page, [*specs, spec])
    assert headers(page) == [*specs, spec]


def query(page) -> dict[str, list[str]]:
    return parse_qs(page.evaluate("location.search").lstrip("?"))


def test_columns_grouping_and_a_saved_view_in_the_browser(
    browser, live_server, alice, project, screenshot_dir
):
    seed(project, alice)
    errors: list[str] = []
    with page_at(browser, live_server, alice, 1440, "light") as page:
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(PAGE)
        expect(rows(page)).to_have_count(8)
        bar_loaded(page, [])
        page.evaluate("window.__smrwebNoReload = true")
        # The save form was rendered with the page's (empty) query: what it sends later is read at submit.
        assert page.locator("[data-view-query]").get_attribute("value") == ""

        # 1. Columns added in place, their values in every row.
        add_column(page, "param:lr", [])
        expect(page).to_have_url(re.compile(r"col=param%3Alr"))
        assert sorted(cells(page, "param:lr")) == sorted(lr for lr, _, _ in RUNS.values())
        lr_of = dict(zip(run_ids(page), cells(page, "param:lr"), strict=True))
        assert lr_of == {r: lr for r, (lr, _, _) in RUNS.items()}
        add_column(page, "metric:val/loss:min", ["param:lr"])
        loss_of = dict(zip(run_ids(page), cells(page, "metric:val/loss:min"), strict=True))
        assert loss_of["sweep-a"] == "0.25" and loss_of["sweep-h"] == "2"  # (i + 1) / 4, the lowest
        assert query(page)["col"] == ["param:lr", "metric:val/loss:min"]

        # Sorted by a click on the lr header: numbers in number order, not as text.
        page.locator('th[data-sort-key="col:param:lr"] a').click()
        expect(page.locator('th[data-sort-key="col:param:lr"]')).to_have_attribute("aria-sort", "ascending")
        expect(page).to_have_url(re.compile(r"sort=col%3Aparam%3Alr"))
        assert run_ids(page) == BY_LR
        assert cells(page, "param:lr") == ["0.003", "0.03", "0.1", "0.5", "2", "9", "10", "30"]

        # Two more, then one moved right (its → link) and one removed (its ×).
        add_column(page, "tag:model", ["param:lr", "metric:val/loss:min"])
        add_column(page, "spend:child_usd", ["param:lr", "metric:val/loss:min", "tag:model"])
        add_column(
            page, "spend:driver_usd", ["param:lr", "metric:val/loss:min", "tag:model", "spend:child_usd"]
        )
        assert cells(page, "spend:child_usd")[0] == "$0.07"  # sweep-g, the seventh run: 0.01 × 7
        page.get_by_role("link", name="Move lr right").click()
        expect(page.locator("#project-live table.runs th.col-chosen").first).to_have_attribute(
            "data-sort-key", "col:metric:val/loss:min"
        )
        bar_loaded(page, [*FINAL, "spend:driver_usd"])
        page.get_by_role("link", name="Remove the column Driver USD").click()
        expect(page.locator('#project-live th[data-sort-key="col:spend:driver_usd"]')).to_have_count(0)
        bar_loaded(page, FINAL)
        assert headers(page) == FINAL
        assert run_ids(page) == BY_LR  # the sort kept through it all
        assert query(page)["col"] == FINAL and query(page)["sort"] == ["col:param:lr"]

        # 2. Grouped by the model tag: each arm together (lr order within), Compare offered for the arms.
        page.locator("form[data-group-form] select[name=group]").select_option("tag:model")
        expect(page).to_have_url(re.compile(r"group=tag%3Amodel"))
        expect(page.locator("#project-live th[data-arm-head]")).to_be_visible()
        arms = page.locator("#project-live td[data-arm]")
        expect(arms).to_have_count(8)
        assert arms.all_inner_texts() == ["gpt-5"] * 4 + ["sonnet"] * 4
        grouped = run_ids(page)
        assert grouped == [r for r in BY_LR if RUNS[r][1] == "gpt-5"] + [
            r for r in BY_LR if RUNS[r][1] == "sonnet"
        ]
        bar_loaded(page, FINAL)
        # The page offers Compare for the arms, and keeps it once the columns bar has loaded.
        link = page.locator("#project-live [data-arms-compare]").get_attribute("href")
        assert "group=tag%3Amodel" in link and link.count("sweep-") == 8

        # 3. A filter changed afterwards: the columns, sort and grouping stay (hidden inputs of the form).
        page.locator("#runs-filter input[name=failed]").check()
        expect(rows(page)).to_have_count(2)
        expect(page).to_have_url(re.compile(r"failed=1"))
        assert headers(page) == FINAL and run_ids(page) == ["sweep-f", "sweep-c"]
        assert page.locator("#project-live td[data-arm]").all_inner_texts() == ["gpt-5", "sonnet"]
        page.locator("#runs-filter input[name=failed]").uncheck()
        expect(rows(page)).to_have_count(8)
        expect(page).not_to_have_url(re.compile(r"failed="))
        assert headers(page) == FINAL and run_ids(page) == grouped
        bar_loaded(page, FINAL)
        shaped = query(page)
        assert shaped == {"col": FINAL, "sort": ["col:param:lr"], "group": ["tag:model"]}, shaped
        assert page.evaluate("window.__smrwebNoReload === true"), "the page was reloaded"
        assert page.locator("[data-view-query]").get_attribute("value") == ""  # still as rendered

        # 4. Saved as a shared view: the query is the one on screen, read from the address bar at submit.
        page.locator("details.save-view > summary").click()
        page.locator("form[data-save-view] input[name=name]").fill("lr by model")
        page.locator("form[data-save-view] input[name=shared]").check()
        page.locator("form[data-save-view] button").click()
        expect(page).to_have_url(re.compile(r"[?&]view=\d+"))
        view = SavedView.objects.get()
        assert view.name == "lr by model" and view.shared and view.owner == alice
        saved = parse_qs(view.query)
        assert saved == {"col": FINAL, "sort": ["col:param:lr"], "group": ["tag:model"]}, view.query
        expect(page).to_have_url(re.compile(rf"\?{re.escape(view.query)}&view={view.pk}$"))
        chip = page.locator(f'[data-saved-views] .view-chip[data-view="{view.pk}"]')
        expect(chip).to_have_class(re.compile(r"\bactive\b"))
        expect(chip).to_contain_text("lr by model")
        expect(chip.locator(".badge")).to_have_text("shared")
        expect(chip.locator("[data-view-modified]")).to_have_count(0)
        bar_loaded(page, FINAL)
        assert headers(page) == FINAL and run_ids(page) == grouped
        page.screenshot(path=str(screenshot_dir / "saved-views-1440-light.png"), full_page=True)
        found = page.evaluate(OVERFLOW_CHECK, False) + page.evaluate(BARS_FIT)
        assert not found, found
        assert not errors, errors

    # 5. Opened afresh by its id (on a phone, dark): the same table, the view's chip active.
    with page_at(browser, live_server, alice, 390, "dark") as page:
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{PAGE}?view={view.pk}")
        expect(page).to_have_url(re.compile(rf"&view={view.pk}$"))
        expect(rows(page)).to_have_count(8)
        bar_loaded(page, FINAL)
        assert headers(page) == FINAL and run_ids(page) == grouped
        assert cells(page, "param:lr") == [RUNS[r][0] for r in grouped]
        expect(page.locator('th[data-sort-key="col:param:lr"]')).to_have_attribute("aria-sort", "ascending")
        assert page.locator("form[data-group-form] select[name=group]").input_value() == "tag:model"
        expect(page.locator(f'[data-saved-views] .view-chip.active[data-view="{view.pk}"]')).to_be_visible()
        page.screenshot(path=str(screenshot_dir / "saved-views-390-dark.png"), full_page=True)
        found = page.evaluate(OVERFLOW_CHECK, True) + page.evaluate(BARS_FIT) + page.evaluate(DARK_CHECK)
        # Opened on the phone, the save form fits the screen too.
        page.locator("details.save-view > summary").click()
        expect(page.locator("form[data-save-view] input[name=name]")).to_have_value("lr by model")
        found += page.evaluate(BARS_FIT)
        assert not found, found
        assert not errors, errors


def test_the_arms_link_stays_once_the_columns_bar_has_loaded(browser, live_server, alice, project):
    for run_id, model in (("r0", "sonnet"), ("r1", "gpt-5"), ("r2", "sonnet")):
        push(project, run_id, score(0.5))
        services.set_tag(
            Run.objects.get(project=project, external_id=run_id), key="model", value=model, by=alice
        )
    with page_at(browser, live_server, alice, 1440, "light") as page:
        page.goto(f"{PAGE}?group=tag:model")
        expect(page.locator("#project-live td[data-arm]")).to_have_count(3)
        bar_loaded(page, [])
        expect(page.locator("#project-live [data-arms-compare]")).to_be_visible(timeout=2_000)
