"""Server-rendered pages and their htmx partials: access, content, fragments, flat query counts."""

import io
from datetime import timedelta

import pytest
from django.utils import timezone

from smrweb.dashboard.templatetags.smrweb import sparkline
from smrweb.tracking import services
from smrweb.tracking.models import ApiToken, Run, Submission
from smrweb.tracking.services.figures import rebuild_project_figures
from tests.factories import admin_project, push

pytestmark = pytest.mark.django_db


def scores(project, run_id, *values):
    push(
        project,
        run_id,
        *[{"type": "score", "score": v, "ts": f"2026-01-01T00:00:{i:02d}Z"} for i, v in enumerate(values)],
    )


def test_pages_require_login(client, project):
    for url in ["/", "/projects/hill/", "/projects/hill/runs/r1/", "/projects/hill/tokens/"]:
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/login/")


def test_login_page_renders_a_form(client):
    response = client.get("/login/")
    assert response.status_code == 200
    assert b'name="password"' in response.content


def moved(project):
    """What the write path does on a status change (the test changes statuses with update()): the runs'
    `updated` moves, and with it the overview's version, under which its figures are kept; the kept
    figures are read again (services/figures.py)."""
    Run.objects.filter(project=project).update(updated=timezone.now())
    rebuild_project_figures(project.pk, runs=True)


def test_overview_shows_best_score_sparkline_and_counts(client_alice, project):
    scores(project, "r1", 0.2, 0.5, 0.4)
    push(
        project,
        "r2",
        {"type": "state", "state": "failed", "failure": {"family": "runtime", "detail": "boom"}},
    )
    response = client_alice.get("/")
    assert response.status_code == 200
    body = response.content.decode()
    assert "Hill climb" in body
    assert '<svg class="spark"' in body
    assert "<b>1</b> failed" in body
    # Nothing verified yet: no best, but the unverified best is named and counted as waiting.
    assert '<div class="big" data-best>—</div>' in body
    assert "0.5 unverified" in body and "<b>3</b> waiting for review" in body
    # Verified ones count, best of a maximize scenario, linked to its submission.
    verified = {s.score: s for s in Submission.objects.filter(run__external_id="r1")}
    Submission.objects.filter(pk__in=[verified[0.2].pk, verified[0.4].pk]).update(status="verified")
    moved(project)
    body = client_alice.get("/").content.decode()
    assert (
        f'href="/projects/hill/submissions/{verified[0.4].pk}/" title="Open submission '
        f'#{verified[0.4].pk}">0.4<' in body
    )
    assert "0.5 unverified" in body  # still better than the verified best
    # Including unverified ones (remembered for the session): 0.5 leads; invalid never counts.
    Submission.objects.filter(pk=verified[0.5].pk).update(status="invalid")
    moved(project)
    body = client_alice.get("/?unverified=1").content.decode()
    assert ">0.4<" in body and "0.5" not in body.split("data-best>")[1].split("</div>")[0]
    Submission.objects.filter(pk=verified[0.5].pk).update(status="candidate")
    moved(project)
    body = client_alice.get("/").content.decode()
    assert f'title="Open submission #{verified[0.5].pk}">0.5<' in body and "Counting unverified" in body


def test_overview_poll_returns_only_the_cards_fragment(client_alice, project):
    response = client_alice.get("/", headers={"HX-Request": "true"})
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="project-cards"')
    assert "<html" not in body
    assert "HX-Request" in response["Vary"]


def test_outsider_gets_404_and_sees_no_projects(client, carol, project):
    client.force_login(carol)
    assert client.get("/projects/hill/").status_code == 404
    assert client.get("/projects/hill/runs/r1/").status_code == 404
    assert "Hill climb" not in client.get("/").content.decode()


def test_project_page_lists_runs_with_badges_and_leaderboard_by_direction(client_alice, project):
    scores(project, "good", 0.9)
    scores(project, "meh", 0.3)
    push(
        project,
        "broken",
        {
            "type": "state",
            "state": "failed",
            "failure": {"family": "runtime", "detail": "repo_like_task_count_mismatch"},
        },
    )
    services.update_run_settings(project, "meh", requested_profile="big", actual_profile="mini")
    body = client_alice.get("/projects/hill/?unverified=1").content.decode()
    assert 'title="runtime · repo_like_task_count_mismatch"' in body
    assert "downgraded" in body
    board = body.split("<h2>Leaderboard</h2>")[1]
    assert board.index(">0.9<") < board.index(">0.3<")


def test_project_page_filters_runs(client_alice, project):
    push(project, "ok-run", {"type": "state", "state": "running"})
    push(project, "bad-run", {"type": "state", "state": "failed"})
    body = client_alice.get("/projects/hill/?failed=1").content.decode()
    assert 'data-run="bad-run"' in body and 'data-run="ok-run"' not in body
    body = client_alice.get("/projects/hill/?q=ok-").content.decode()
    assert 'data-run="ok-run"' in body and 'data-run="bad-run"' not in body
    body = client_alice.get("/projects/hill/?state=live").content.decode()
    assert 'data-run="ok-run"' in body and 'data-run="bad-run"' not in body


def test_stalled_run_shows_badge_with_evidence(client_alice, project):
    push(project, "quiet", {"type": "metric", "key": "loss", "value": 1})
    Run.objects.filter(external_id="quiet").update(last_progress_at=timezone.now() - timedelta(hours=2))
    services.flag_stalled_runs()
    body = client_alice.get("/projects/hill/").content.decode()
    assert "badge-stalled" in body and "No progress for 2h" in body
    run_page = client_alice.get("/projects/hill/runs/quiet/").content.decode()
    assert "Stalled:" in run_page


def test_runs_partial_is_a_fragment_that_keeps_the_filters(client_alice, project):
    push(project, "r1", {"type": "state", "state": "failed"})
    body = client_alice.get("/projects/hill/?failed=1", headers={"HX-Request": "true"}).content.decode()
    assert body.lstrip().startswith('<div id="project-live"')
    assert 'hx-get="/projects/hill/?failed=1"' in body


def test_project_page_queries_stay_flat_as_runs_grow(
    client_alice, alice, project, django_assert_max_num_queries
):
    for i in range(3):
        scores(project, f"r{i}", 0.1 * i, 0.2 * i)
    # 23: the project's excluded runs are read once (the leaderboard and the pending count filter by
    # them instead of joining every submission to its run), what waits to be verified is two index
    # reads (how many, up to a cap, and the best), and the chart counts the runs it draws the best of.
    # 25: the submissions markers of the chart's runs (its pieces are kept under them) and of the page's
    # runs (kept with the block, so that a poll after one run's turn can send its row alone).
    # 27: the keys the add-a-column menu offers (one union of param, tag and metric keys) and the saved
    # views the person may open.
    with django_assert_max_num_queries(27) as small:
        client_alice.get("/projects/hill/")
    for i in range(3, 40):
        scores(project, f"r{i}", 0.1, 0.2)
        run = Run.objects.get(project=project, external_id=f"r{i}")
        services.set_tag(run, key="sweep", value=str(i), by=alice)  # tags come in one query for the page
        services.set_tag(run, key=f"label-{i}", by=alice)
        services.update_run_labels(run, by=alice, display_name=f"try {i}", pinned=i % 5 == 0)
    with django_assert_max_num_queries(len(small.captured_queries)):
        client_alice.get("/projects/hill/")


def test_overview_queries_stay_flat_as_projects_grow(
    client_alice, alice, project, django_assert_max_num_queries
):
    with django_assert_max_num_queries(20) as small:
        client_alice.get("/")
    for i in range(10):
        p = admin_project(f"p{i}", by=alice)
        scores(p, "r", 0.5)
    with django_assert_max_num_queries(len(small.captured_queries)):
        client_alice.get("/")


def test_run_page_shows_spend_split_turns_and_failure(client_alice, project):
    push(
        project,
        "r1",
        {"type": "agent.turn", "turn": 0, "tokens_in": 1000, "tokens_out": 100, "cost_usd": 0.25},
        {
            "type": "agent.turn",
            "turn": 0,
            "actor": "w1",
            "parent_actor": "driver",
            "tokens_in": 10,
            "cost_usd": 0.5,
        },
        {
            "type": "state",
            "state": "failed",
            "failure": {"family": "runtime", "detail": "workspace does not exist"},
        },
    )
    body = client_alice.get("/projects/hill/runs/r1/").content.decode()
    assert "$0.75" in body and "$0.25" in body and "$0.50" in body
    assert "workspace does not exist" in body
    assert "data-cards-poll" not in body and 'id="run-poll"' in body  # finished runs stop polling


def test_live_run_page_polls_itself(client_alice, project):
    push(project, "r1", {"type": "state", "state": "running"})
    body = client_alice.get("/projects/hill/runs/r1/").content.decode()
    poll = body.split('id="run-poll"')[1].split(">")[0]
    assert (
        'hx-get="/projects/hill/runs/r1/"' in poll
        and 'hx-trigger="every 3s' in poll
        and "data-cards-poll" in poll
    )


def test_artifact_download_from_the_dashboard_returns_exact_bytes(client_alice, project):
    artifact, _ = services.store_artifact(
        project, "r1", path="submission/optimizer.py", content=io.BytesIO(b"LR = 3e-4\n")
    )
    response = client_alice.get(f"/projects/hill/runs/r1/artifacts/{artifact.pk}/download")
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == b"LR = 3e-4\n"
    assert response["X-Content-SHA256"] == artifact.blob.sha256


def test_tokens_page_is_for_admins_only(client, bob, project):
    client.force_login(bob)
    assert client.get("/projects/hill/tokens/").status_code == 403


def test_admin_creates_a_token_shown_once_and_revokes_it(client_alice, project):
    response = client_alice.post("/projects/hill/tokens/", {"name": "harness"}, follow=True)
    assert response.redirect_chain == [("/projects/hill/tokens/", 302)]  # a reload cannot mint another
    assert "no-store" in response["Cache-Control"]
    raw = response.context["new_token"]
    assert raw.startswith("smr_") and raw in response.content.decode()
    token = ApiToken.objects.get(name="harness")
    assert raw not in client_alice.get("/projects/hill/tokens/").content.decode()
    client_alice.post(f"/projects/hill/tokens/{token.pk}/revoke")
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert services.authenticate_token(raw) is None


def test_token_form_without_a_name_shows_a_form_error(client_alice, project):
    response = client_alice.post("/projects/hill/tokens/", {"name": ""})
    assert response.status_code == 200
    assert "This field is required" in response.content.decode()
    assert not ApiToken.objects.filter(project=project).exists()


def test_sparkline_marks_the_best_point_in_the_scenario_direction():
    up = str(sparkline([1.0, 3.0, 2.0], maximize=True))
    down = str(sparkline([1.0, 3.0, 2.0], maximize=False))
    assert "best of these 3" in up and "best of these 1" in down
    assert "—" in str(sparkline([]))


def test_unknown_api_path_answers_json_404(client):
    response = client.get("/api/v1/nope/nothing")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("application/json")


def test_pager_links_do_not_pile_up_page_parameters_and_the_poll_keeps_the_page(client_alice, project):
    for i in range(120):
        push(project, f"r{i:03d}", {"type": "metric", "key": "k", "value": 1})
    body = client_alice.get("/projects/hill/?page=2&state=live").content.decode()
    assert 'href="?state=live&page=3"' in body or 'href="?state=live&amp;page=3"' in body
    assert "page=2&page=" not in body and "page=2&amp;page=" not in body
    assert 'hx-get="/projects/hill/?page=2&amp;state=live"' in body


def test_overview_shows_each_projects_source_health_dot(client_alice, project):
    from smrweb.tracking.models import SourceHealth

    project.source = "smr"
    project.save()
    SourceHealth.objects.create(
        project=project, consecutive_failures=3, last_error_kind="rate_limited", last_error="429 <too many>"
    )
    body = client_alice.get("/").content.decode()
    assert 'class="source-dot bad"' in body
    assert "3 failure(s) in a row — rate_limited: 429 &lt;too many&gt;" in body
    SourceHealth.objects.filter(project=project).update(
        consecutive_failures=0, last_success_at=timezone.now()
    )
    assert 'class="source-dot good"' in client_alice.get("/").content.decode()


def test_head_requests_answer_like_get_for_uptime_checkers(client_alice, project):
    """HEAD / used to answer 405, which uptime checkers read as down (walkthrough P3)."""
    from django.test import Client

    assert Client().head("/").status_code == 302  # to the sign-in page, as GET
    for url in ["/", "/projects/hill/", "/projects/hill/review/", "/api/v1/health"]:
        response = client_alice.head(url)
        assert response.status_code == 200, url
        assert response.content == b""


@pytest.mark.parametrize(
    "value, text",
    [
        (3.965e-05, "0.00003965"),
        (0.0412, "0.0412"),
        (3.14159, "3.142"),
        (12345.6, "12,346"),
        (-0.0, "0"),
        (-1e-12, "-1e-12"),
        (2.0, "2"),
        (1234.6, "1235"),
        (-0.00001, "-0.00001"),
        (1e-5 / 3, "0.000003333"),
    ],
)
def test_numbers_are_written_out_without_exponents_or_minus_zero(value, text):
    from smrweb.core.numbers import plain_number, signed

    assert plain_number(value) == text
    assert signed(-0.0) == "0" and signed(-4e-11) == "−4e-11" and signed(3.965e-05) == "+0.00003965"


def test_the_overviews_figures_are_kept_until_a_run_moves(
    client_alice, project, django_assert_max_num_queries
):
    """The per-project figures (counts, best, spend, sparkline) read every run: a second load of the same
    version reads none of them again; a write to a run is seen at once."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    scores(project, "r1", 0.2, 0.5)
    with CaptureQueriesContext(connection) as first:
        client_alice.get("/")
    with CaptureQueriesContext(connection) as second:
        body = client_alice.get("/").content.decode()
    figures = ("tracking_submission", "tracking_agentturn")
    assert any(t in q["sql"] for q in first.captured_queries for t in figures)
    assert not any(t in q["sql"] for q in second.captured_queries for t in figures)
    assert "<b>2</b> waiting for review" in body
    scores(project, "r1", 0.7)
    assert "<b>3</b> waiting for review" in client_alice.get("/").content.decode()


def _overview_spend(body: str) -> str:
    return body.split('class="spend"', 1)[1].split("</span></span>", 1)[0]


def test_the_overviews_spend_is_the_runs_tables_spend_and_says_which_it_is(client_alice, project):
    """The walkthrough's SMR card said "$6.67 total" (turn cost) while the runs table's Spend (billed)
    summed to $7.03, and did not say which: the card sums the table's figure, names it, and says when
    the turns' cost differs."""
    push(project, "billed", {"type": "agent.turn", "turn": 1, "cost_usd": 1.00})
    push(project, "turns-only", {"type": "agent.turn", "turn": 1, "cost_usd": 0.50})
    Run.objects.filter(external_id="billed").update(source_total_usd="1.36", updated=timezone.now())
    rebuild_project_figures(project.pk)  # the raw UPDATE: what a sync's write does
    table = client_alice.get("/projects/hill/").content.decode()
    assert ">$1.36" in table and ">$0.50" in table  # the runs table's Spend: billed, else turn cost
    spend = _overview_spend(client_alice.get("/").content.decode())
    assert "$1.86 total" in spend  # 1.36 + 0.50, not the turns' 1.50
    assert 'data-spend-basis="billed and turn cost"' in spend
    assert "· turns $1.50" in spend and "$0.36 more" in spend  # the difference, said
    # Every run billed, by what its turns cost: "billed", and no difference to report.
    Run.objects.filter(external_id="turns-only").update(source_total_usd="0.50", updated=timezone.now())
    Run.objects.filter(external_id="billed").update(source_total_usd="1.00", updated=timezone.now())
    rebuild_project_figures(project.pk)
    spend = _overview_spend(client_alice.get("/").content.decode())
    assert "$1.50 total" in spend and 'data-spend-basis="billed"' in spend and "turns $" not in spend
    # No source bills: turn cost, said so.
    Run.objects.update(source_total_usd=None, updated=timezone.now())
    rebuild_project_figures(project.pk)
    spend = _overview_spend(client_alice.get("/").content.decode())
    assert "$1.50 total" in spend and 'data-spend-basis="turn cost"' in spend
