"""Issue 14, items 6 and 10: over budget as a state (SQL filter and counts that agree with the Python
rule, badge, run alert, API), and runs tables that work like trackers (server-side sort, stable
paging, search over models and profiles, paged turns and artifacts, submissions by run)."""

from __future__ import annotations

import io
import json
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import yaml

from smrweb.dashboard.views.projects import RUNS_PER_PAGE
from smrweb.tracking import services
from smrweb.tracking.filters import SORTS
from smrweb.tracking.models import Run
from smrweb.tracking.queries import budget
from tests.factories import push

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 5, 1, tzinfo=UTC)


def turn(n, *, tokens_in=1000, tokens_out=100, cost=0.5, model="gpt-5.4", actor="driver", minute=0):
    return {
        "type": "agent.turn",
        "turn": n,
        "actor": actor,
        "model": model,
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        "cost_usd": cost,
        "ts": (T0 + timedelta(minutes=minute, seconds=n)).isoformat(),
    }


def run_with(project, run_id, *, usd=None, tokens=None, spend=Decimal("0"), turn_tokens=(0, 0), **poll):
    """A run whose turns cost `spend` and used `turn_tokens`, with budgets, and what a poll saw."""
    if spend or any(turn_tokens):
        push(project, run_id, turn(1, tokens_in=turn_tokens[0], tokens_out=turn_tokens[1], cost=float(spend)))
    services.update_run_settings(project, run_id, budget_usd=usd, budget_tokens=tokens)
    if poll:
        services.record_poll(project, run_id, **poll)
    return Run.objects.get(project=project, external_id=run_id)


def body(response) -> str:
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def table_ids(html: str) -> list[str]:
    return re.findall(r'<tr data-run="([^"]+)"', html)


# --- over budget: one rule in SQL and in Python ---------------------------------------------------


@pytest.fixture
def budget_world(project):
    """Runs on every side of every budget rule, keyed by what they should count as."""
    over = {
        "usd-over": run_with(project, "usd-over", usd=Decimal("5"), spend=Decimal("6.55")),
        "tokens-over": run_with(project, "tokens-over", tokens=1_500_000, turn_tokens=(1_400_000, 175_000)),
        "both-over": run_with(
            project, "both-over", usd=Decimal("1"), tokens=100, spend=Decimal("2"), turn_tokens=(90, 20)
        ),
        # The source bills more than the turns show: its total is what counts.
        "billed-over": run_with(
            project, "billed-over", usd=Decimal("3"), spend=Decimal("1"), source_total_usd=Decimal("3.20")
        ),
        # The source reports tokens no turn accounts for.
        "source-tokens-over": run_with(
            project,
            "source-tokens-over",
            tokens=1000,
            turn_tokens=(100, 10),
            source_spend={"tokens_in": 900, "tokens_out": 200},
        ),
    }
    within = {
        "exactly-at": run_with(project, "exactly-at", usd=Decimal("2"), spend=Decimal("2")),
        "under": run_with(
            project, "under", usd=Decimal("10"), tokens=10_000, spend=Decimal("1"), turn_tokens=(10, 10)
        ),
        "no-budget": run_with(project, "no-budget", spend=Decimal("100"), turn_tokens=(10**6, 10**6)),
        "zero-budget": run_with(project, "zero-budget", usd=Decimal("0"), tokens=0, spend=Decimal("1")),
        # The source bills less than the turns add up to: its own total is within budget.
        "billed-under": run_with(
            project, "billed-under", usd=Decimal("3"), spend=Decimal("4"), source_total_usd=Decimal("2.50")
        ),
        # A source that states no token totals (JSON null): the turns count, and they are within.
        "source-null-tokens": run_with(
            project,
            "source-null-tokens",
            tokens=1000,
            turn_tokens=(400, 100),
            source_spend={"tokens_in": None, "tokens_out": None, "total_usd": None},
        ),
        "source-tokens-under": run_with(
            project,
            "source-tokens-under",
            tokens=1000,
            turn_tokens=(5000, 10),
            source_spend={"tokens_in": 500, "tokens_out": 100},
        ),
    }
    return over, within


def test_sql_and_python_agree_on_who_is_over_budget(budget_world, project):
    over, within = budget_world
    runs = Run.objects.filter(project=project)
    in_sql = set(runs.filter(budget.over_budget()).values_list("external_id", flat=True))
    in_python = {r.external_id for r in runs if r.is_over_budget}
    assert in_sql == in_python == set(over)
    for on in budget.KINDS:
        in_sql = set(runs.filter(budget.over_budget(on=on)).values_list("external_id", flat=True))
        in_python = {r.external_id for r in runs if any(o["budget"] == on for o in r.budget_overruns)}
        assert in_sql == in_python, on
    assert set(runs.filter(budget.over_budget(on="usd")).values_list("external_id", flat=True)) == {
        "usd-over",
        "both-over",
        "billed-over",
    }
    assert set(runs.filter(budget.over_budget(on="tokens")).values_list("external_id", flat=True)) == {
        "tokens-over",
        "both-over",
        "source-tokens-over",
    }


def test_overruns_name_the_budget_and_the_amounts(budget_world):
    over, _ = budget_world
    (usd,) = over["usd-over"].budget_overruns
    assert usd["budget"] == "usd" and usd["spent"] == Decimal("6.55") and usd["limit"] == Decimal("5")
    assert round(usd["fraction"], 2) == 1.31
    (tokens,) = over["tokens-over"].budget_overruns
    assert (tokens["budget"], tokens["spent"], tokens["limit"]) == ("tokens", 1_575_000, 1_500_000)
    assert [o["budget"] for o in over["both-over"].budget_overruns] == ["usd", "tokens"]


def test_overview_card_counts_runs_over_budget(client_alice, budget_world, other_project):
    html = body(client_alice.get("/"))
    card = html[html.index('data-project="hill"') :]
    assert re.search(r'data-count="over-budget"[^>]*><b>5</b> over budget', card)


def test_project_page_badges_counts_and_filters_runs_over_budget(client_alice, budget_world):
    over, within = budget_world
    html = body(client_alice.get("/projects/hill/"))
    assert set(re.findall(r'<tr data-run="([^"]+)"[^>]*>.*?</tr>', html, re.S)) == set(over) | set(within)
    for run_id in over:
        row = re.search(rf'<tr data-run="{run_id}"[^>]*>(.*?)</tr>', html, re.S).group(1)
        assert 'data-badge="over-budget"' in row, run_id
    for run_id in within:
        row = re.search(rf'<tr data-run="{run_id}"[^>]*>(.*?)</tr>', html, re.S).group(1)
        assert 'data-badge="over-budget"' not in row, run_id
    assert re.search(r'data-count="over-budget"[^>]*><b>5</b> over budget', html)
    usd_row = re.search(r'<tr data-run="usd-over"[^>]*>(.*?)</tr>', html, re.S).group(1)
    assert "131 % of the $5.00 budget ($6.55 spent)" in usd_row

    assert set(table_ids(body(client_alice.get("/projects/hill/?over_budget=true")))) == set(over)
    assert set(table_ids(body(client_alice.get("/projects/hill/?over_budget=tokens")))) == {
        "tokens-over",
        "both-over",
        "source-tokens-over",
    }
    assert set(table_ids(body(client_alice.get("/projects/hill/?over_budget=false")))) == set(within)
    # The filter combines with the others.
    assert set(table_ids(body(client_alice.get("/projects/hill/?over_budget=true&q=billed")))) == {
        "billed-over"
    }


def test_a_bad_filter_value_is_ignored_and_named(client_alice, budget_world):
    html = body(client_alice.get("/projects/hill/?over_budget=maybe&sort=nonsense"))
    assert len(table_ids(html)) == 12
    assert re.search(r"data-ignored>Ignored <code>over_budget</code>, <code>sort</code>", html)


def test_run_page_says_which_budget_is_exceeded_and_by_how_much(client_alice, budget_world):
    html = body(client_alice.get("/projects/hill/runs/usd-over/"))
    alert = re.search(
        r"<div class=\"alert bad\" role=\"alert\" data-over-budget[^>]*>(.*?)</div>", html, re.S
    ).group(1)
    assert "spent 131 % of the $5.00 budget ($6.55 spent)" in alert
    assert "h1" in html and re.search(r"<h1[^>]*>.*data-badge=\"over-budget\".*</h1>", html, re.S)

    html = body(client_alice.get("/projects/hill/runs/tokens-over/"))
    alert = re.search(r"data-over-budget[^>]*>(.*?)</div>", html, re.S).group(1)
    assert "used 1.6M / 1.5M tokens (105 %)" in alert and "$" not in alert

    html = body(client_alice.get("/projects/hill/runs/both-over/"))
    alert = re.search(r"data-over-budget[^>]*>(.*?)</div>", html, re.S).group(1)
    assert "200 % of the $1.00 budget" in alert and "110 / 100 tokens (110 %)" in alert

    html = body(client_alice.get("/projects/hill/runs/exactly-at/"))
    assert "data-over-budget" not in html and 'data-badge="over-budget"' not in html


def test_the_run_api_says_over_budget_and_on_which(api, budget_world):
    response = api.get("/api/v1/projects/hill/runs/both-over")
    assert response.status_code == 200
    assert response.json()["over_budget"] is True and response.json()["over_budget_on"] == ["usd", "tokens"]
    response = api.get("/api/v1/projects/hill/runs/under")
    assert response.json()["over_budget"] is False and response.json()["over_budget_on"] == []
    listed = api.get("/api/v1/projects/hill/runs?over_budget=true&page_size=100").json()
    assert {r["external_id"] for r in listed["results"]} == set(budget_world[0])
    assert all(r["over_budget"] for r in listed["results"])
    bad = api.get("/api/v1/projects/hill/runs?over_budget=maybe")
    assert bad.status_code == 400 and "over_budget" in json.dumps(bad.json())


# --- sorting --------------------------------------------------------------------------------------


@pytest.fixture
def sortable(project):
    """Runs that differ in every sortable column, plus ties."""
    specs = [
        ("alpha", 3, 0.9, "done"),
        ("bravo", 1, 0.2, "running"),
        ("charlie", 2, None, "failed"),
        ("delta", 5, 0.5, "running"),
        ("echo", 4, 0.2, "queued"),
    ]
    for i, (run_id, turns, best, state) in enumerate(specs):
        push(project, run_id, *[turn(n, cost=0.1 * (i + 1), minute=i) for n in range(turns)])
        if best is not None:
            push(
                project,
                run_id,
                {"type": "score", "score": best, "ts": (T0 + timedelta(minutes=i, seconds=30)).isoformat()},
            )
        push(
            project,
            run_id,
            {"type": "state", "state": state, "ts": (T0 + timedelta(minutes=i, seconds=40)).isoformat()},
        )
    return [s[0] for s in specs]


@pytest.mark.parametrize(
    "sort, expected",
    [
        ("run", ["alpha", "bravo", "charlie", "delta", "echo"]),
        ("-run", ["echo", "delta", "charlie", "bravo", "alpha"]),
        ("turns", ["bravo", "charlie", "alpha", "echo", "delta"]),
        ("-turns", ["delta", "echo", "alpha", "charlie", "bravo"]),
        ("-best", ["alpha", "delta", "echo", "bravo", "charlie"]),  # ties on id, descending; no score last
        ("best", ["bravo", "echo", "delta", "alpha", "charlie"]),  # ties on id, ascending; no score last
        ("-spend", ["echo", "delta", "charlie", "alpha", "bravo"]),  # 2.0 ties on id, descending
        ("state", ["alpha", "charlie", "echo", "bravo", "delta"]),
        ("-activity", ["echo", "delta", "charlie", "bravo", "alpha"]),
    ],
)
def test_runs_table_sorts_on_the_server(client_alice, sortable, sort, expected):
    html = body(client_alice.get(f"/projects/hill/?sort={sort}"))
    assert table_ids(html) == expected
    key = sort.lstrip("-")
    header = re.search(
        rf'<th class="[^"]*sortable[^"]*" aria-sort="([a-z]+)" data-sort-key="{key}">(.*?)</th>', html, re.S
    )
    assert header.group(1) == ("descending" if sort.startswith("-") else "ascending")
    assert ("▼" if sort.startswith("-") else "▲") in header.group(2)
    # Clicking the sorted header again flips it.
    flipped = key if sort.startswith("-") else f"-{key}"
    assert f"sort={flipped}" in header.group(2).replace("%2D", "-")


def test_every_sort_key_works_in_both_directions_on_the_api(api, sortable):
    for key in SORTS:
        for sort in (key, f"-{key}"):
            response = api.get(f"/api/v1/projects/hill/runs?sort={sort}")
            assert response.status_code == 200, sort
            assert len(response.json()["results"]) == 5
    bad = api.get("/api/v1/projects/hill/runs?sort=password")
    assert (
        bad.status_code == 400 and "sort" in json.dumps(bad.json()) and "password" in json.dumps(bad.json())
    )


def test_sort_links_keep_the_filters_and_drop_the_page(client_alice, sortable):
    html = body(client_alice.get("/projects/hill/?state=running&q=a&page=1"))
    link = re.search(r'data-sort-key="turns"><a href="([^"]+)"', html).group(1).replace("&amp;", "&")
    assert "state=running" in link and "q=a" in link and "page=" not in link and "sort=-turns" in link
    assert table_ids(body(client_alice.get(link))) == ["delta", "bravo"]


def test_paging_a_sorted_table_with_ties_is_stable(client_alice, project):
    # A page and a bit of runs with the same number of turns and no score: every sort key ties; id
    # breaks them.
    n = RUNS_PER_PAGE + 10
    for i in range(n):
        push(project, f"tie-{i:02d}", turn(1, cost=0.25))
    for sort in ("turns", "-turns", "best", "-spend"):
        first = table_ids(body(client_alice.get(f"/projects/hill/?sort={sort}")))
        second = table_ids(body(client_alice.get(f"/projects/hill/?sort={sort}&page=2")))
        assert len(first) == RUNS_PER_PAGE and len(second) == 10
        assert set(first).isdisjoint(second) and len(set(first) | set(second)) == n, sort
        ids = list(
            Run.objects.filter(external_id__in=first + second)
            .order_by("id")
            .values_list("external_id", flat=True)
        )
        expected = ids if not sort.startswith("-") else ids[::-1]
        assert first + second == expected, sort


# --- search ---------------------------------------------------------------------------------------


@pytest.fixture
def searchable(project):
    push(project, "plain", turn(1, model="claude-opus"))
    push(project, "turn-model", turn(1, model="codex_gpt_5_4_mini_low"))
    services.update_run_settings(
        project,
        "profile",
        requested_profile="codex_gpt_5_4_medium",
        actual_profile="codex_gpt_5_4_mini_medium",
    )
    services.record_poll(
        project,
        "worker-downgrade",
        requested_profile="p1",
        actual_profile="p1",
        actor_profiles=[
            {"role": "orchestrator", "requested": "p1", "actual": "p1"},
            {"role": "worker", "actor": "w-1", "requested": "big_model", "actual": "small_model"},
        ],
    )
    services.record_poll(
        project,
        "actors-fine",
        actor_profiles=[{"role": "worker", "actor": "w-2", "requested": "same", "actual": "same"}],
    )
    push(
        project,
        "broken",
        {"type": "state", "state": "failed", "failure": {"family": "quota", "detail": "out of credits"}},
    )
    services.update_run_settings(project, "branchy", git_branch="feature/faster-step")


@pytest.mark.parametrize(
    "q, expected",
    [
        ("gpt_5_4_mini", {"turn-model", "profile"}),
        ("GPT_5_4_MINI", {"turn-model", "profile"}),
        ("downgraded", {"profile", "worker-downgrade"}),
        ("small_model", {"worker-downgrade"}),
        ("claude", {"plain"}),
        ("quota", {"broken"}),
        ("credits", {"broken"}),
        ("failed", {"broken"}),
        ("faster-step", {"branchy"}),
        ("nothing-like-this", set()),
    ],
)
def test_search_matches_models_profiles_failures_and_badge_words(client_alice, searchable, q, expected):
    assert set(table_ids(body(client_alice.get("/projects/hill/", {"q": q})))) == expected


def test_search_through_the_api_too(api, searchable):
    response = api.get("/api/v1/projects/hill/runs", {"q": "gpt_5_4_mini"})
    assert {r["external_id"] for r in response.json()["results"]} == {"turn-model", "profile"}


# --- paged turns and artifacts on the run page ----------------------------------------------------


def test_run_page_pages_its_agent_turns(client_alice, project):
    push(project, "long", *[turn(n, minute=n) for n in range(1, 62)])  # 61 turns, newest is #61
    html = body(client_alice.get("/projects/hill/runs/long/"))
    turns = [int(t) for t in re.findall(r'<tr data-turn="(\d+)"', html)]
    assert turns == list(range(61, 36, -1))
    assert "latest 25 of 61" in html and 'data-pager="turns_page"' in html and "page 1 of 3" in html

    html = body(client_alice.get("/projects/hill/runs/long/?turns_page=2"))
    assert [int(t) for t in re.findall(r'<tr data-turn="(\d+)"', html)] == list(range(36, 11, -1))
    assert "26–50 of 61" in html
    html = body(client_alice.get("/projects/hill/runs/long/?turns_page=3"))
    assert [int(t) for t in re.findall(r'<tr data-turn="(\d+)"', html)] == list(range(11, 0, -1))
    for bad in ("0", "-4", "abc", "999999999999999999999"):
        response = client_alice.get(f"/projects/hill/runs/long/?turns_page={bad}")
        assert response.status_code == 200, bad


def test_paging_the_turns_keeps_the_artifacts_page_and_the_poll_keeps_both(client_alice, project):
    push(project, "both", *[turn(n, minute=n) for n in range(1, 30)])
    for i in range(23):
        services.store_artifact(
            project, "both", path="submission/optimizer.py", content=io.BytesIO(f"v{i}".encode())
        )
    html = body(client_alice.get("/projects/hill/runs/both/?artifacts_page=2"))
    assert "11–20 of 23" in html and html.count('<tr data-artifact="submission/optimizer.py"') == 10
    next_turns = (
        re.search(r'data-pager="turns_page".*?hx-get="([^"]+)"', html, re.S).group(1).replace("&amp;", "&")
    )
    assert "artifacts_page=2" in next_turns and "turns_page=2" in next_turns
    # The live poll asks for the same pages.
    poll = re.search(r'id="run-poll"[^>]*hx-get="([^"]+)"', html).group(1).replace("&amp;", "&")
    assert "artifacts_page=2" in poll
    # The pager asks for its card: the turns card comes back, and out of band the poll and the artifacts
    # card (still on its page 2) follow the new query, so their links keep the turns page.
    assert 'hx-target="#turns-card"' in html and '"X-Smrweb-Only": "turns-card"' in html
    fragment = body(
        client_alice.get(next_turns, headers={"HX-Request": "true", "X-Smrweb-Only": "turns-card"})
    )
    assert fragment.lstrip().startswith('<section class="card" id="turns-card">') and "<html" not in fragment
    assert "26–29 of 29" in fragment
    artifacts = fragment[fragment.index('<section hx-swap-oob="true" class="card" id="artifacts-card">') :]
    assert "11–20 of 23" in artifacts and "?turns_page=2&amp;artifacts_page=3" in artifacts
    poll = re.search(r'<div hx-swap-oob="true" id="run-poll"[^>]*hx-get="([^"]+)"', fragment)
    assert poll and "turns_page=2" in poll[1] and "artifacts_page=2" in poll[1].replace("&amp;", "&")
    # Any other htmx request gets the whole live part, with both pages.
    whole = body(client_alice.get(next_turns, headers={"HX-Request": "true"}))
    assert whole.lstrip().startswith('<div id="run-live"') and "<html" not in whole
    assert "26–29 of 29" in whole and "11–20 of 23" in whole


# --- submissions API by run -------------------------------------------------------------------------


def test_submissions_api_honours_run(api, project):
    push(project, "a", {"type": "score", "score": 0.1}, {"type": "score", "score": 0.3})
    push(project, "b", {"type": "score", "score": 0.2})
    everything = api.get("/api/v1/projects/hill/submissions").json()
    assert everything["count"] == 3
    only_a = api.get("/api/v1/projects/hill/submissions", {"run": "a"}).json()
    assert only_a["count"] == 2 and {s["score"] for s in only_a["results"]} == {0.1, 0.3}
    unknown = api.get("/api/v1/projects/hill/submissions", {"run": "nope"})
    assert unknown.status_code == 200 and unknown.json()["count"] == 0 and unknown.json()["results"] == []
    assert api.get("/api/v1/projects/hill/submissions", {"run": "A"}).json()["count"] == 0  # exact id


def test_the_schema_documents_the_new_parameters(anon_api, db):
    response = anon_api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    schema = (
        json.loads(response.content)
        if response.content.lstrip().startswith(b"{")
        else yaml.safe_load(response.content)
    )
    subs = {p["name"]: p for p in schema["paths"]["/api/v1/projects/{slug}/submissions"]["get"]["parameters"]}
    assert "run" in subs and "unknown run" in subs["run"]["description"]
    runs = {p["name"]: p for p in schema["paths"]["/api/v1/projects/{slug}/runs"]["get"]["parameters"]}
    assert {"over_budget", "sort", "q", "col", "group", "view"} <= set(runs)
    assert "-spend" not in runs["sort"]["schema"].get("enum", [])  # any chosen column sorts too: free text
    assert "spend" in runs["sort"]["description"] and "col:<column>" in runs["sort"]["description"]
    assert "true" in runs["over_budget"]["schema"]["enum"]
    assert "metric:KEY" in runs["col"]["description"] and runs["view"]["schema"]["type"] == "integer"
    run_schema = schema["components"]["schemas"]["Run"]["properties"]
    assert run_schema["over_budget"]["type"] == "boolean" and run_schema["over_budget_on"]["type"] == "array"


def test_a_first_click_on_a_score_column_puts_the_best_first_in_the_scenarios_direction(client_alice, alice):
    from tests.factories import admin_project

    minimize = services.create_scenario(
        key="loss", name="Loss", score_metric="val_loss", direction="minimize"
    )
    admin_project("lossy", name="Lossy", scenario=minimize, by=alice)
    for slug, expected in (("hill", "-best"), ("lossy", "best")):
        html = body(client_alice.get(f"/projects/{slug}/"))
        link = re.search(r'data-sort-key="best"><a href="([^"]+)"', html).group(1)
        assert re.search(r"[?&;]sort=([^&]+)", link.replace("&amp;", "&")).group(1) == expected, slug
