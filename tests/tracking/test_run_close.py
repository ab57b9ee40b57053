"""Closing a silent run as abandoned (services.close_run / capabilities.refusal): who may, which runs, what is
written (a state change, the audit, the stall flag, `updated`, the alert announcement), what later events
do (recorded; a later state wins and reopens the run), and where abandoned runs are counted: the
overview's and the project page's counts, the runs filter, `run.failed` alerts, the carry-forward."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import time_machine
from django.http import QueryDict
from django.utils import timezone

from smrweb.tracking import queries, services, signals
from smrweb.tracking.errors import CloseRefused, InvalidInput, NotAllowed
from smrweb.tracking.events import parse_events
from smrweb.tracking.filters import RunFilter
from smrweb.tracking.models import (
    ApiToken,
    AuditEvent,
    Channel,
    MetricPoint,
    Notification,
    NotificationStatus,
    Run,
    RunState,
    StateChange,
    Trigger,
)
from smrweb.tracking.queries.knowledge import carry_forward
from smrweb.tracking.services import capabilities
from smrweb.tracking.services.alerts import evaluation as alert_evaluation
from smrweb.tracking.services.capabilities import Action

pytestmark = pytest.mark.django_db


def push(project, run_id: str, *events: dict) -> Run:
    services.ingest_events(project, run_id, parse_events(json.dumps(list(events))))
    return Run.objects.get(project=project, external_id=run_id)


def silent_run(project, run_id: str = "r1", *, for_: timedelta | None = None, state="running") -> Run:
    """A run whose last news is `for_` old (default: its project's stall threshold and a minute)."""
    ago = for_ if for_ is not None else project.stall_after + timedelta(minutes=1)
    with time_machine.travel(timezone.now() - ago, tick=False):
        return push(
            project,
            run_id,
            {"type": "state", "state": state},
            {"type": "metric", "key": "loss", "value": 0.5},
        )


def states(run: Run) -> list[str]:
    return list(StateChange.objects.filter(run=run).order_by("ts", "id").values_list("state", flat=True))


# --- the close -------------------------------------------------------------------------------------------


def test_a_reviewer_closes_a_silent_push_run_as_abandoned(project, bob, django_capture_on_commit_callbacks):
    run = silent_run(project)
    assert services.flag_stalled_runs() == [run]
    run.refresh_from_db()
    assert run.is_stalled
    heard: list[tuple[str, int]] = []

    def receiver(sender, kind, object_id, **kw):
        heard.append((kind, object_id))

    signals.alerts_due.connect(receiver)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            closed = services.close_run(run, by=bob, reason="  the harness was OOM-killed at 03:12  ")
    finally:
        signals.alerts_due.disconnect(receiver)
    closed.refresh_from_db()
    assert closed.state == RunState.ABANDONED and closed.is_terminal
    assert (closed.failure_family, closed.failure_detail, closed.failure_source) == (
        "closed",
        "the harness was OOM-killed at 03:12",
        "bob",
    )
    assert closed.stalled_since is None and not closed.is_stalled
    assert closed.finished_at is not None and closed.finished_at > run.last_progress_at
    assert closed.updated > run.updated  # the pages polling it see a new version
    assert states(closed) == ["running", "abandoned"]
    change = StateChange.objects.get(run=closed, state="abandoned")
    assert change.ts == closed.finished_at and change.event_id.startswith("smrweb-close-")
    audit = AuditEvent.objects.get(verb="run.closed")
    assert (audit.actor, audit.object_id, audit.project) == (bob, str(run.pk), project)
    assert (
        audit.detail["reason"] == "the harness was OOM-killed at 03:12" and audit.detail["was"] == "running"
    )
    assert audit.detail["silent_since"] == run.last_progress_at.isoformat()
    assert ("run", run.pk) in heard
    # A stalled flag is never raised again for a finished run.
    assert services.flag_stalled_runs(now=timezone.now() + timedelta(days=1)) == []


def test_an_admin_may_close_and_a_git_run_may_be_closed(project, alice):
    project.source = "git"  # a git workspace's run has no harness to report its end at all
    project.save(update_fields=["source"])
    run = silent_run(project, "git-main")
    assert services.close_run(run, by=alice, reason="the agent's machine is gone").state == "abandoned"


def test_who_may_not_close(project, victor, carol, token):
    run = silent_run(project)
    api_token = ApiToken.objects.get(project=project)
    for who in (victor, carol, api_token):
        with pytest.raises(NotAllowed):
            services.close_run(run, by=who, reason="x")
    assert Run.objects.get(pk=run.pk).state == "running"
    assert not AuditEvent.objects.filter(verb="run.closed").exists()


@pytest.mark.parametrize("reason", ["", "   ", None])
def test_a_reason_is_required(project, bob, reason):
    run = silent_run(project)
    with pytest.raises(InvalidInput) as refused:
        services.close_run(run, by=bob, reason=reason)
    assert refused.value.field == "reason"
    with pytest.raises(InvalidInput):
        services.close_run(run, by=bob, reason="x" * 5001)
    assert Run.objects.get(pk=run.pk).state == "running" and states(run) == ["running"]


def test_a_run_that_sent_news_within_the_stall_threshold_is_refused_with_what_is_required(project, bob):
    project.stall_after = timedelta(minutes=15)
    project.save(update_fields=["stall_after"])
    run = silent_run(project, for_=timedelta(minutes=5))
    refusal = capabilities.refusal(run.project, Action.CLOSE, run=run)
    assert "5m ago" in refusal and "15m" in refusal and "in 10m" in refusal
    with pytest.raises(CloseRefused) as refused:
        services.close_run(run, by=bob, reason="dead?")
    assert refused.value.status == 409 and refused.value.code == "close_refused"
    assert refused.value.message == refusal
    # Once silent for the threshold, the same run may be closed.
    later = timezone.now() + timedelta(minutes=11)
    assert capabilities.refusal(run.project, Action.CLOSE, run=run, now=later) == ""


def test_news_that_arrived_after_the_page_was_read_wins(project, bob):
    run = silent_run(project)  # as the reviewer's page read it: silent
    push(project, "r1", {"type": "metric", "key": "loss", "value": 0.4, "step": 1})  # then news arrived
    with pytest.raises(CloseRefused):
        services.close_run(run, by=bob, reason="looked dead")
    assert Run.objects.get(pk=run.pk).state == "running"


@pytest.mark.parametrize("state", ["done", "failed", "stopped", "canceled", "abandoned"])
def test_a_finished_run_is_refused(project, bob, state):
    run = silent_run(project, state=state)
    with pytest.raises(CloseRefused) as refused:
        services.close_run(run, by=bob, reason="x")
    assert refused.value.message == f"The run is already {state}."


def test_an_smr_run_is_refused_stop_it_instead(bob):
    smr = services.create_project("smr-close", source="smr", smr_project_id="p-close", smr_api_key="k")
    services.add_member(smr, bob, role="reviewer")
    run = silent_run(smr)
    with pytest.raises(CloseRefused) as refused:
        services.close_run(run, by=bob, reason="x")
    assert "Managed Research reports the end of its runs itself" in refused.value.message
    assert "stop the run instead" in refused.value.message


def test_a_paused_run_may_be_closed_once_silent_for_the_threshold(project, bob):
    run = silent_run(project, state="paused")
    assert services.flag_stalled_runs() == []  # paused on purpose: never flagged stalled
    assert (
        services.close_run(run, by=bob, reason="paused a week ago; nobody is resuming it").state
        == "abandoned"
    )


def test_the_close_is_the_latest_state_even_after_a_state_stamped_in_the_future(project, bob):
    ahead = (timezone.now() + timedelta(minutes=3)).isoformat()  # a harness whose clock runs fast
    with time_machine.travel(timezone.now() - timedelta(hours=1), tick=False):
        run = push(project, "r1", {"type": "state", "state": "running", "ts": ahead})
    closed = services.close_run(run, by=bob, reason="gone")
    assert closed.state == "abandoned" and states(closed) == ["running", "abandoned"]


# --- after the close -----------------------------------------------------------------------------------


def test_later_events_are_recorded_and_a_later_state_reopens_the_run(project, bob):
    run = silent_run(project)
    before = run.last_progress_at
    services.close_run(run, by=bob, reason="the harness looked dead")
    # A buffered batch from before the close (its own times) and a metric now: recorded, still abandoned.
    push(
        project,
        "r1",
        {"type": "state", "state": "executing", "ts": (before + timedelta(seconds=1)).isoformat()},
        {"type": "metric", "key": "loss", "value": 0.3, "step": 1},
    )
    run.refresh_from_db()
    assert run.state == "abandoned" and run.failure_source == "bob"
    assert MetricPoint.objects.filter(run=run).count() == 2
    assert states(run) == ["running", "executing", "abandoned"]
    # The harness was only silent: it says it is running again. That state is newer: it wins.
    push(project, "r1", {"id": "back", "type": "state", "state": "running"})
    run.refresh_from_db()
    assert run.state == "running" and not run.is_terminal and run.finished_at is None
    assert (run.failure_family, run.failure_detail) == ("", "")
    assert states(run) == ["running", "executing", "abandoned", "running"]  # the history keeps the close
    # And it can end the way it says.
    push(project, "r1", {"id": "end", "type": "state", "state": "done"})
    assert Run.objects.get(pk=run.pk).state == "done"


# --- where abandoned runs are counted --------------------------------------------------------------------


def test_abandoned_runs_are_counted_and_filtered(project, bob):
    services.close_run(silent_run(project, "gone"), by=bob, reason="crashed")
    push(project, "live", {"type": "state", "state": "running"})
    push(project, "failed", {"type": "state", "state": "failed"})
    [summary] = queries.project_summaries([project])
    assert (summary.abandoned, summary.failed, summary.active, summary.stalled, summary.runs) == (
        1,
        1,
        1,
        0,
        3,
    )
    counts = queries.run_condition_counts(project)
    assert (counts["abandoned"], counts["failed"], counts["stalled"]) == (1, 1, 0)
    runs = Run.objects.filter(project=project)

    def names(query: str) -> list[str]:
        filtered = RunFilter(QueryDict(query), queryset=runs)
        assert filtered.is_valid(), filtered.errors
        return sorted(filtered.qs.values_list("external_id", flat=True))

    assert names("state=abandoned") == ["gone"]
    assert names("state=abandoned&state=failed") == ["failed", "gone"]
    assert names("state=live") == ["live"]  # abandoned is a finished state
    assert names("q=abandoned") == ["gone"]  # the state's name as a search word
    assert names("q=crashed") == ["gone"]  # the reason, as failure text
    assert names("failed=true") == ["failed"]  # `failed` stays the failed state


def test_a_run_failed_rule_tells_who_closed_the_run_and_why(project, alice, bob):
    r = services.create_alert_rule(
        project, by=alice, trigger=Trigger.RUN_FAILED, channel=Channel.INBOX, recipient="alice"
    )
    run = services.close_run(silent_run(project), by=bob, reason="SIGKILLed by the scheduler")
    alert_evaluation.evaluate_run(run.pk)
    alert_evaluation.evaluate_run(run.pk)  # one episode, one notification
    [n] = r.notifications.exclude(status=NotificationStatus.SUPPRESSED)
    assert n.title.endswith("run r1 abandoned")
    assert "closed as abandoned by bob" in n.body and "SIGKILLed by the scheduler" in n.body
    # A rule made later (the first one deleted: the same rule twice is refused) records it as predating
    # the rule, not sent.
    services.delete_alert_rule(r, by=alice)
    later = services.create_alert_rule(
        project, by=alice, trigger=Trigger.RUN_FAILED, channel=Channel.INBOX, recipient="alice"
    )
    assert [x.status for x in Notification.objects.filter(rule=later)] == [NotificationStatus.SUPPRESSED]


def test_the_carry_forward_names_abandoned_runs_and_the_reason(project, bob):
    services.close_run(silent_run(project), by=bob, reason="ran out of disk in the data loader")
    block = carry_forward(project, n=3)
    [item] = [i for i in block.failed if i.run == "r1"]
    assert item.reasons == ["run_abandoned"]
    assert item.why == "the run was abandoned — ran out of disk in the data loader"
    assert "[run abandoned]" in block.text
