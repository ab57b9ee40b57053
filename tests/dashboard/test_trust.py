"""Issue 14, "trust what you see": the project's numbers count valid work only, admins can exclude junk,
rollbacks target valid work and say what happened, the queue and leaderboard triage, the second-person
rule explains itself, and the arena handoff records what the arena said."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from smrweb.dashboard import live
from smrweb.tracking import queries, services
from smrweb.tracking.errors import InvalidInput, NotAllowed, RollbackRefused
from smrweb.tracking.models import (
    AuditEvent,
    Review,
    Role,
    Rollback,
    Run,
    SourceKind,
    Submission,
    SubmissionTransition,
)
from smrweb.tracking.services import rollbacks
from smrweb.tracking.services import submissions as lifecycle
from smrweb.tracking.services.params import log_params
from tests.factories import UserFactory, push

pytestmark = pytest.mark.django_db
HOOK = "https://hooks.example/rollback"


def scored(project, run_id, *values) -> list[Submission]:
    push(project, run_id, *[{"type": "score", "score": v} for v in values])
    return list(Submission.objects.filter(run__external_id=run_id).order_by("id"))[-len(values) :]


def verify(sub, by, *, passed=True) -> Submission:
    lifecycle.request_verification(sub, by=by)
    outcome = "passed" if passed else "failed"
    return lifecycle.record_verification(
        sub.pk, lifecycle.VerificationResult(outcome, 0 if passed else 1, "", outcome)
    )


def board_rows(body: str) -> list[str]:
    board = re.search(r'<table class="leaderboard.*?</table>', body, re.DOTALL)[0]
    return re.findall(r'<a class="rid" href="[^"]+" title="([^"]+)"', board)


# --- valid by default ------------------------------------------------------------------------------


def test_a_run_best_never_counts_an_invalid_or_rejected_score(project, bob, alice):
    low, high = scored(project, "r", 0.3, 0.9)
    run = Run.objects.get(external_id="r")
    assert run.best_score == 0.9
    verify(high, bob, passed=False)
    run.refresh_from_db()
    # Latest reads the rule best reads (it never reads better than best beside it); the newer invalid
    # score is still shown, marked, beside it (tests/dashboard/test_counted_everywhere.py).
    assert run.best_score == 0.3 and run.latest_score == 0.3
    lifecycle.request_verification(high, by=alice)  # invalid → verifying: it may count again
    run.refresh_from_db()
    assert run.best_score == 0.9


def test_leaderboard_counts_verified_work_one_row_per_run_and_pages(client_alice, project, bob):
    for i in range(23):
        subs = scored(project, f"run-{i:02d}", i / 100, i / 100 + 0.5)
        for sub in subs:
            verify(sub, bob)
    junk = scored(project, "junk", 99.0)[0]  # an unverified junk score (the API docs' example body)
    bad = scored(project, "bad", 50.0)[0]
    verify(bad, bob, passed=False)

    body = client_alice.get("/projects/hill/").content.decode()
    rows = board_rows(body)
    assert rows == [f"run-{i:02d}" for i in range(22, 2, -1)]  # 20 per page, best first, one per run
    assert "1–20 of 23" in body and "junk" not in rows and "bad" not in rows
    assert "1 unverified submission not counted (best 99)" in body
    rows = board_rows(client_alice.get("/projects/hill/?lb=2").content.decode())
    assert rows == ["run-02", "run-01", "run-00"]
    every = client_alice.get("/projects/hill/?board=all").content.decode()
    assert board_rows(every)[:2] == ["run-22", "run-21"] and "1–20 of 46" in every
    # Including unverified ones (remembered for the session): the junk leads; invalid never counts.
    rows = board_rows(client_alice.get("/projects/hill/?unverified=1").content.decode())
    assert rows[0] == "junk" and "bad" not in rows
    assert board_rows(client_alice.get("/projects/hill/").content.decode())[0] == "junk"
    # An admin excludes it: gone from the board, shown as excluded where it is listed.
    lifecycle.exclude_submission(
        junk, by=project.memberships.get(role="admin").user, reason="API docs example"
    )
    assert board_rows(client_alice.get("/projects/hill/").content.decode())[0] == "run-22"
    page = client_alice.get(f"/projects/hill/submissions/{junk.pk}/").content.decode()
    assert "data-excluded" in page and "API docs example" in page and "Roll back to this" not in page


def test_empty_verified_board_says_what_is_waiting(client_alice, project):
    scored(project, "r", 0.4, 0.7)
    body = client_alice.get("/projects/hill/").content.decode()
    assert "No verified submission yet: 2 waiting for verification (best 0.7)" in body
    assert "data-scores-scope" in body and 'aria-current="true">verified only' in body


# --- exclusion ---------------------------------------------------------------------------------------


def test_exclusion_is_for_admins_needs_a_reason_is_audited_and_reversible(project, alice, bob):
    sub = scored(project, "r", 0.8)[0]
    with pytest.raises(NotAllowed):
        lifecycle.exclude_submission(sub, by=bob, reason="junk")
    with pytest.raises(InvalidInput) as err:
        lifecycle.exclude_submission(sub, by=alice, reason="  ")
    assert err.value.field == "reason"
    lifecycle.exclude_submission(sub, by=alice, reason="junk")
    run = Run.objects.get(external_id="r")
    assert run.best_score is None and run.latest_score is None and run.score_count == 1
    assert AuditEvent.objects.filter(verb="submission.excluded", detail__reason="junk").exists()
    lifecycle.include_submission(sub, by=alice)
    run.refresh_from_db()
    assert run.best_score == 0.8
    assert AuditEvent.objects.filter(verb="submission.included").count() == 1


def test_an_excluded_run_leaves_the_overview_queue_and_carry_forward(client_alice, project, alice, bob):
    good = scored(project, "good", 0.5)[0]
    verify(good, bob)
    test_run = scored(project, "test-run", 0.95)[0]
    verify(test_run, bob)
    assert ">0.95<" in client_alice.get("/").content.decode()
    response = client_alice.post(
        "/projects/hill/runs/test-run/exclusion", {"action": "exclude", "reason": "a smoke test"}
    )
    assert response.status_code == 302
    overview = client_alice.get("/").content.decode()
    assert ">0.95<" not in overview and ">0.5<" in overview
    assert queries.carry_forward(project).best.run == "good"
    run_page = client_alice.get("/projects/hill/runs/test-run/").content.decode()
    assert "data-run-excluded" in run_page and "a smoke test" in run_page
    assert "data-excluded" in client_alice.get("/projects/hill/").content.decode()
    client_alice.post("/projects/hill/runs/test-run/exclusion", {"action": "include"})
    assert ">0.95<" in client_alice.get("/").content.decode()
    # A reviewer cannot; a missing reason is a message, not a 500, and nothing changes.
    client_alice.force_login(bob)
    response = client_alice.post(
        "/projects/hill/runs/test-run/exclusion", {"action": "exclude", "reason": "x"}
    )
    assert response.status_code == 403 and Run.objects.get(external_id="test-run").excluded_at is None
    client_alice.force_login(alice)
    response = client_alice.post("/projects/hill/runs/test-run/exclusion", {"action": "exclude"}, follow=True)
    assert "Say why it is excluded" in response.content.decode()
    assert Run.objects.get(external_id="test-run").excluded_at is None


# --- regressions and rollbacks --------------------------------------------------------------------------


@pytest.fixture
def regressing(project, alice):
    services.update_project(project, regression_threshold=0.1, rollback_webhook_url=HOOK, by=alice)
    return project


def test_roll_back_to_the_best_targets_the_best_verified_and_never_an_invalid_one(
    client_alice, regressing, bob
):
    ok, best, latest = scored(regressing, "r", 0.6, 0.9, 0.2)
    verify(ok, bob)
    verify(best, bob, passed=False)  # the best score failed verification
    [r] = queries.regressions(regressing)
    assert (r.best, r.latest, r.target.pk) == (0.6, 0.2, ok.pk)
    body = client_alice.get("/projects/hill/runs/r/").content.decode()
    assert "Roll back to the best</button>" in body and f"#{ok.pk} (0.6, verified)" in body
    assert f"submission #{ok.pk} (score 0.6, verified)?" in body  # the confirmation names the status
    with pytest.raises(RollbackRefused, match="failed verification"):
        rollbacks.request_rollback(by=bob, reason="x", submission=best)


def test_an_unverified_target_says_so_in_the_button_and_the_confirmation(client_alice, regressing):
    best, latest = scored(regressing, "r", 0.9, 0.3)
    body = client_alice.get("/projects/hill/runs/r/").content.decode()
    assert "Roll back to the best (not verified)" in body
    assert f"submission #{best.pk} (score 0.9, candidate: NOT verified)" in body


def test_after_a_rollback_the_banner_says_what_happened_and_a_second_click_changes_nothing(
    client_alice, regressing
):
    best, latest = scored(regressing, "r", 0.9, 0.3)
    response = client_alice.post("/projects/hill/runs/r/rollback", {"submission": best.pk, "reason": "back"})
    assert response.status_code == 302
    rollback = Rollback.objects.get()
    rollbacks.finish(rollback.pk, ok=True, detail="the webhook answered HTTP 200")
    body = client_alice.get("/projects/hill/runs/r/").content.decode()
    banner = re.search(r'<div class="alert info regression".*?</div>', body, re.DOTALL)[0]
    assert "Rolled back to" in banner and f"#{best.pk}</a> (0.9)" in banner and "applied" in banner
    assert "The run is <b>running</b>" in banner and "Roll back to the best" not in banner
    # A second request of the same rollback with nothing scored since returns the first.
    again = client_alice.post(
        "/projects/hill/runs/r/rollback", {"submission": best.pk, "reason": "back"}, follow=True
    )
    assert Rollback.objects.count() == 1 and "already rolled back" in again.content.decode()
    # A new score after it: the regression is live again and the rollback is offered again.
    scored(regressing, "r", 0.25)
    body = client_alice.get("/projects/hill/runs/r/").content.decode()
    assert "Roll back to the best" in body and "data-rolled-back" not in body


def test_accepted_and_applied_rollbacks_are_told_apart(client_alice, regressing):
    best, latest = scored(regressing, "r", 0.9, 0.3)
    rollback = rollbacks.request_rollback(
        by=regressing.memberships.get(role="admin").user, reason="x", submission=best
    ).rollback
    rollbacks.finish(rollback.pk, ok=True, detail="queued", accepted_only=True)
    body = client_alice.get("/projects/hill/runs/r/").content.decode()
    assert 'data-rolled-back="accepted"' in body and "has not confirmed the restore" in body
    assert 'data-rollback-status="accepted"' in body


def _cards(html: str, into: dict | None = None) -> dict:
    into = {} if into is None else into
    into.update(re.findall(r'data-card="([^"]+)"\s+data-version="([^"]*)"', html))
    return into


def test_a_rollback_of_a_finished_run_says_at_the_top_what_happened_and_what_runs_next(
    client_alice, regressing
):
    """The walkthrough: a done SMR run's rollback ended "accepted" far down the page, the run still done,
    the green "requested; a worker is dispatching it" flash at the top, and nothing said whether anything
    runs again. A line at the top of the page says where the rollback stands, live, and what runs next."""
    [best] = scored(regressing, "r", 0.9)
    push(regressing, "r", {"type": "state", "state": "done"})
    page = client_alice.post(
        "/projects/hill/runs/r/rollback", {"submission": best.pk, "reason": "back"}, follow=True
    ).content.decode()
    flash = re.search(r"<div[^>]*data-flash[^>]*>[^<]*requested; a worker is dispatching it", page)[0]
    assert "data-flash-until-change" in flash  # goes once the live page shows more
    line = re.search(r'<div class="alert info rollback-line".*?</div>', page, re.DOTALL)[0]
    assert 'data-rollback-outcome="requested"' in line
    assert (
        f"Rollback to submission #{best.pk} (0.9): requested — a worker is sending it to the project" in line
    )
    assert page.index('id="alert-rollback"') < page.index('id="run-stats"')  # at the top, not far down
    assert "hx-get=" in page.split('id="run-poll"', 1)[1][:200]  # a finished run's page polls meanwhile
    shown = _cards(page)

    rollback = Rollback.objects.get()
    rollbacks.finish(rollback.pk, ok=True, detail="the webhook answered HTTP 202", accepted_only=True)
    answer = client_alice.get(
        "/projects/hill/runs/r/", headers={"HX-Request": "true", live.CARDS_HEADER: live.cards_header(shown)}
    ).content.decode()
    line = re.search(r'<div[^>]* class="alert warn rollback-line".*?</div>', answer, re.DOTALL)[0]
    assert 'data-rollback-outcome="accepted"' in line
    assert "accepted by the project&#x27;s webhook, which took the request and has not confirmed" in line
    assert "The run stays done: nothing runs again unless the harness starts it; start the next run" in line
    assert 'href="/projects/hill/launches/new?from=r"' in line and "Start the next run</a>" in line
    # Anything scored after it: the line has told its news.
    scored(regressing, "r", 0.95)
    assert "rollback-line" not in client_alice.get("/projects/hill/runs/r/").content.decode()


def test_a_rollbacks_outcome_is_what_is_true_for_its_source(regressing, alice):
    [best] = scored(regressing, "r", 0.9)
    rollback = rollbacks.request_rollback(by=alice, reason="x", submission=best).rollback
    run = rollback.run
    run.project.source = SourceKind.SMR
    rollback.status, run.state = "accepted", "done"
    said = rollbacks.outcome(rollback, run)
    assert said.next_run and said.tone == "warn"
    assert said.text == (
        f"Rollback to submission #{best.pk} (0.9): accepted by SMR, which took the request and has not "
        "confirmed the restore. The run stays done: SMR restores the checkpoint in place and a finished run "
        "does not start again; start the next run from it."
    )
    rollback.status, run.state = "applied", "running"
    said = rollbacks.outcome(rollback, run)
    assert not said.next_run and said.tone == "good"
    assert said.text.endswith(
        "applied by SMR, which confirmed the restore. The run is running and goes on from there."
    )
    rollback.status, rollback.detail = "failed", "[13:10] attempt 1: HTTP 500\n[13:11] attempt 2: gave up\n"
    said = rollbacks.outcome(rollback, run)
    assert said.tone == "bad" and said.text.endswith(
        ": failed ([13:11] attempt 2: gave up). Nothing was restored."
    )


# --- the review queue --------------------------------------------------------------------------------------


def test_review_queue_counts_filters_groups_per_run_and_pages(client_alice, project, bob):
    for i in range(60):
        scored(project, f"run-{i:02d}", 0.1, 0.2 + i / 1000)
    verify(Submission.objects.filter(run__external_id="run-00").order_by("score").first(), bob)
    body = client_alice.get("/projects/hill/review/").content.decode()
    assert re.search(r'data-status="waiting">all waiting <b>120</b>', body)
    assert re.search(r"to verify <b>119</b>", body) and re.search(r"to review <b>1</b>", body)
    assert "60 rows" in body and "page 1 of 2" in body and 'data-run-waiting="2"' in body
    rows = re.findall(r'<tr data-submission="(\d+)" data-queue-row', body)
    assert len(rows) == 50
    verified = client_alice.get("/projects/hill/review/?status=verified").content.decode()
    assert len(re.findall(r"<tr data-submission=", verified)) == 1
    every = client_alice.get("/projects/hill/review/?all=1&page=3").content.decode()
    assert "120 rows" in every and "page 3 of 3" in every
    # "Next in queue" on a waiting submission's page: the best other waiting one.
    top = Submission.objects.get(pk=rows[0])
    page = client_alice.get(f"/projects/hill/submissions/{top.pk}/").content.decode()
    assert "data-next-in-queue" in page


# --- the second-person rule, reject reasons ---------------------------------------------------------------


def test_the_second_person_rule_explains_itself(client, project, alice, bob):
    services.update_project(project, require_second_reviewer=True, by=alice)
    sub = scored(project, "r", 0.7)[0]
    client.force_login(bob)
    page = client.get(f"/projects/hill/submissions/{sub.pk}/").content.decode()
    assert "data-proposer-note" in page and "your own approval will not count" in page
    verify(sub, bob)
    page = client.get(f"/projects/hill/submissions/{sub.pk}/").content.decode()
    assert 'disabled aria-describedby="approve-why">Approve' in page and "data-own-approval" in page
    # Posted anyway (an old tab): recorded, marked as not counting, flashed as a warning.
    response = client.post(f"/projects/hill/submissions/{sub.pk}/approve", {"comment": ""}, follow=True)
    body = response.content.decode()
    assert 'class="alert warn" role="status" data-flash="warning"' in body and "does not count" in body
    assert 'data-review-counted="false"' in body and "not counted — the proposer&#x27;s own" in body
    assert Review.objects.get().counted is False
    client.force_login(alice)
    page = client.get(f"/projects/hill/submissions/{sub.pk}/").content.decode()
    assert "data-own-approval" not in page
    client.post(f"/projects/hill/submissions/{sub.pk}/approve", {"comment": "looks right"})
    sub.refresh_from_db()
    # Two people other than the proposer approve (issue 33): alice's is the first of two.
    assert sub.status == "verified"
    dave = UserFactory(username="dave")
    services.add_member(project, dave, role=Role.REVIEWER)
    client.force_login(dave)
    client.post(f"/projects/hill/submissions/{sub.pk}/approve", {"comment": "agreed"})
    sub.refresh_from_db()
    assert sub.status == "approved" and list(Review.objects.values_list("counted", flat=True)) == [
        False,
        True,
        True,
    ]


def test_reject_needs_a_reason_and_the_history_keeps_it(client_alice, project, bob):
    sub = scored(project, "r", 0.7)[0]
    verify(sub, bob)
    response = client_alice.post(f"/projects/hill/submissions/{sub.pk}/reject", {"comment": "  "})
    assert response.status_code == 400 and "Say why it is rejected" in response.content.decode()
    sub.refresh_from_db()
    assert sub.status == "verified" and not Review.objects.exists()
    client_alice.post(f"/projects/hill/submissions/{sub.pk}/reject", {"comment": "overfits the public split"})
    assert (
        SubmissionTransition.objects.filter(to_status="rejected").get().reason == "overfits the public split"
    )
    assert not SubmissionTransition.objects.filter(reason__in=["rejectd", "approved"]).exists()


# --- the arena handoff
# ------------------------------------------------------------------------------------------


def _approved(project, bob, alice, run_id, value) -> Submission:
    sub = verify(scored(project, run_id, value)[0], bob)
    return lifecycle.review(sub, by=alice, verdict="approve", comment="ok").submission


def test_mark_uploaded_records_the_arena_id_and_results_say_better_or_worse(
    client_alice, project, alice, bob
):
    project.scenario.arena_direction = "minimize"  # e.g. a loss on the arena's own board
    project.scenario.save()
    first, second = _approved(project, bob, alice, "a", 0.5), _approved(project, bob, alice, "b", 0.6)
    response = client_alice.post(
        f"/projects/hill/submissions/{first.pk}/upload", {"arena_ref": "javascript:alert(1)//x://"}
    )
    assert response.status_code == 400 and "must start with https://" in response.content.decode()
    client_alice.post(
        f"/projects/hill/submissions/{first.pk}/upload", {"arena_ref": "https://arena.example/s/81"}
    )
    client_alice.post(f"/projects/hill/submissions/{second.pk}/upload", {"arena_ref": "sub-82"})
    first.refresh_from_db()
    assert first.arena_ref == "https://arena.example/s/81"
    client_alice.post(f"/projects/hill/submissions/{first.pk}/record", {"rank": "9", "arena_score": "3.40"})
    response = client_alice.post(
        f"/projects/hill/submissions/{second.pk}/record", {"rank": "7", "arena_score": "3.31"}, follow=True
    )
    body = response.content.decode()
    assert "score −0.09 against the previous result: better (lower is better); 2 places up (rank 7)" in body
    assert (
        'data-rank-delta="-2"' in body and "▲ 2 places up" in body and "arena score: lower is better" in body
    )
    assert "sub-82" in body
    response = client_alice.post(
        f"/projects/hill/submissions/{second.pk}/record", {"rank": "8", "arena_score": "3.5"}, follow=True
    )
    assert ": worse (lower is better); 1 place down (rank 8)" in response.content.decode()
    assert (
        'class="alert warn" role="status" data-flash="warning">Arena result recorded'
        in response.content.decode()
    )


# --- carry-forward that teaches
# -------------------------------------------------------------------------------------


def test_carry_forward_names_approaches_and_does_not_call_a_new_runs_start_regressed(project, alice, bob):
    services.update_project(project, regression_threshold=0.1, by=alice)
    verify(scored(project, "veteran", 0.9)[0], bob)
    push(project, "newcomer", {"type": "state", "state": "running"})
    services.update_run_settings(project, "newcomer", git_branch="try-lion-optimizer")
    scored(project, "newcomer", 0.2, 0.5, 0.3)  # starts low (not a regression), then drops 0.2 (one)
    push(
        project,
        "crashed",
        {"type": "message", "body": "Try warmup 500 with cosine decay", "topic": "kickoff"},
        {"type": "state", "state": "failed", "failure": {"family": "oom", "detail": "CUDA out of memory"}},
    )
    sub = verify(scored(project, "rejected-run", 0.6)[0], bob)
    lifecycle.review(sub, by=alice, verdict="reject", comment="leaks the validation set")
    cf = queries.carry_forward(project, n=10)
    regressed = [item for item in cf.failed if "regressed" in item.reasons]
    assert [item.score for item in regressed] == [0.3]
    assert (
        regressed[0].title == "branch try-lion-optimizer"
        and "its run's best so far then (0.5)" in regressed[0].why
    )
    crashed = next(item for item in cf.failed if "run_failed" in item.reasons)
    assert (
        crashed.title == "kickoff: Try warmup 500 with cosine decay"
        and "oom: CUDA out of memory" in crashed.why
    )
    rejected = next(item for item in cf.failed if "rejected" in item.reasons)
    assert "leaks the validation set" in rejected.why
    assert cf.best.run == "veteran" and "(verified)" in cf.text


# --- the project chart follows the runs table's filters ---------------------------------------------------


def test_the_project_chart_follows_the_runs_tables_filters(client_alice, project):
    scored(project, "ok-run", 0.4, 0.6)
    push(project, "broken", {"type": "score", "score": 0.9}, {"type": "state", "state": "failed"})
    every = client_alice.get("/projects/hill/chart/?unverified=1").content.decode()
    assert "3 scores from 2 runs" in every and "data-chart-filtered" not in every
    failed = client_alice.get("/projects/hill/chart/?failed=1").content.decode()
    assert "data-chart-filtered" in failed and "1 score from 1 run" in failed
    assert 'hx-get="/projects/hill/chart/?failed=1"' in failed  # it keeps polling the same filter
    page = client_alice.get("/projects/hill/?q=ok-&page=1").content.decode()
    assert 'hx-get="/projects/hill/chart/?q=ok-"' in page and "2 scores from 1 run" in page
    nothing = client_alice.get("/projects/hill/chart/?q=no-such-run").content.decode()
    assert "No scores from the runs matching the filters." in nothing


def test_the_project_chart_follows_the_over_budget_and_param_filters(client_alice, project, alice):
    """The walkthrough: 11 runs matched "over budget", but the chart still drew "the 12 runs with the best
    scores, of 38". Every filter of the table narrows the chart (RunFilter's, one list)."""
    scored(project, "thrifty", 0.4, 0.6)
    push(
        project, "spender", {"type": "score", "score": 0.9}, {"type": "agent.turn", "turn": 1, "cost_usd": 3}
    )
    log_params(Run.objects.get(project=project, external_id="spender"), [("lr", "0.1")], by=alice)
    services.update_run_settings(project, "spender", budget_usd=Decimal("1"))
    over = client_alice.get("/projects/hill/chart/?over_budget=true&unverified=1").content.decode()
    assert "data-chart-filtered" in over and "1 score from 1 run" in over
    assert 'hx-get="/projects/hill/chart/?over_budget=true' in over
    page = client_alice.get("/projects/hill/?over_budget=true&unverified=1").content.decode()
    assert "data-chart-filtered" in page and "1 score from 1 run" in page
    within = client_alice.get("/projects/hill/chart/?over_budget=false&unverified=1").content.decode()
    assert "2 scores from 1 run" in within
    param = client_alice.get("/projects/hill/chart/?param=lr%3D0.1&unverified=1").content.decode()
    assert "data-chart-filtered" in param and "1 score from 1 run" in param
