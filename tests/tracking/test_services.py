"""The write path: `services.ingest_events` (atomic, idempotent, order-independent summaries),
`store_artifact` (content-addressed, verified) and `flag_stalled_runs`."""

from __future__ import annotations

import hashlib
import io
import json
import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db.models import Sum
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from smrweb.tracking import events as ev
from smrweb.tracking import services
from smrweb.tracking.errors import ArtifactTooLarge, DigestMismatch, InvalidEvents, InvalidInput
from smrweb.tracking.models import (
    AgentTurn,
    Artifact,
    ArtifactBlob,
    AuditEvent,
    Checkpoint,
    Experiment,
    MetricPoint,
    Run,
    RunState,
    RuntimeMessage,
    StateChange,
    Submission,
    TurnKind,
)
from tests.factories import admin_project

T0 = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)


def at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat()


def ingest(project, run_id: str, *events: dict) -> services.IngestResult:
    """Through the real validator, as every source does."""
    return services.ingest_events(project, run_id, ev.parse_events(json.dumps(list(events))))


def run_of(project, run_id: str = "r1") -> Run:
    return Run.objects.get(project=project, external_id=run_id)


def row_counts(run_id: str = "r1") -> dict[str, int]:
    return {
        model.__name__: model.objects.filter(run__external_id=run_id).count()
        for model in (MetricPoint, AgentTurn, Submission, StateChange, RuntimeMessage, Checkpoint, Experiment)
    }


@pytest.fixture
def bounded(alice):
    """A project whose scenario bounds scores to [0, 1]."""
    scenario = services.create_scenario(key="bounded", name="Bounded", score_min=0.0, score_max=1.0)
    return admin_project("bounded", scenario=scenario, by=alice)


@pytest.fixture
def minimize(alice):
    scenario = services.create_scenario(
        key="runtime", name="Runtime", direction="minimize", score_metric="seconds"
    )
    return admin_project("fast", scenario=scenario, by=alice)


MIXED = [
    {"type": "metric", "id": "m1", "key": "loss", "value": 0.9, "step": 1, "ts": at(1)},
    {"type": "metric", "id": "m2", "key": "loss", "value": 0.7, "step": 2, "ts": at(2)},
    {
        "type": "agent.turn",
        "id": "t1",
        "turn": 1,
        "tokens_in": 100,
        "tokens_out": 10,
        "cost_usd": 0.25,
        "ts": at(1),
    },
    {
        "type": "agent.turn",
        "id": "t2",
        "turn": 1,
        "actor": "w1",
        "parent_actor": "driver",
        "tokens_in": 50,
        "tokens_out": 5,
        "cost_usd": 0.125,
        "ts": at(2),
    },
    {"type": "score", "id": "s1", "score": 0.4, "ts": at(3), "experiment": "e1"},
    {"type": "state", "id": "st1", "state": "executing", "ts": at(3)},
    {"type": "message", "id": "msg1", "body": "hello", "ts": at(3)},
    {"type": "checkpoint", "id": "cp1", "label": "first", "ts": at(3)},
]


# --- run creation and atomicity -----------------------------------------------------------------


def test_first_event_creates_the_run(project):
    assert not Run.objects.exists()
    result = ingest(project, "r1", *MIXED)
    run = run_of(project)
    assert result.run == run
    assert (result.accepted, result.duplicates) == (len(MIXED), 0)
    assert run.started_at == T0 + timedelta(minutes=1)  # the earliest event, not the arrival
    assert row_counts() == {
        "MetricPoint": 2,
        "AgentTurn": 2,
        "Submission": 1,
        "StateChange": 1,
        "RuntimeMessage": 1,
        "Checkpoint": 1,
        "Experiment": 1,
    }


def test_runs_are_scoped_to_their_project(project, other_project):
    ingest(project, "same", {"type": "metric", "id": "m", "key": "k", "value": 1})
    ingest(other_project, "same", {"type": "metric", "id": "m", "key": "k", "value": 1})
    assert Run.objects.filter(external_id="same").count() == 2
    assert MetricPoint.objects.filter(run__external_id="same").count() == 2


def test_a_batch_with_one_score_out_of_bounds_writes_nothing(bounded):
    bad = [*MIXED, {"type": "score", "id": "s-bad", "score": 1.5}]
    with pytest.raises(InvalidEvents) as caught:
        ingest(bounded, "r1", *bad)
    [error] = caught.value.errors
    assert (error.index, error.field) == (len(MIXED), "score")
    assert "maximum" in error.message
    assert not Run.objects.filter(external_id="r1").exists()
    assert not MetricPoint.objects.exists() and not AgentTurn.objects.exists()


def test_a_rejected_batch_leaves_an_existing_run_unchanged(bounded):
    ingest(bounded, "r1", *MIXED)
    before = run_of(bounded)
    counts = row_counts()
    with pytest.raises(InvalidEvents) as caught:
        ingest(
            bounded,
            "r1",
            {"type": "agent.turn", "id": "t9", "turn": 9, "tokens_in": 1000, "cost_usd": 5},
            {"type": "score", "id": "s9", "score": -0.1},
        )
    assert [(e.index, e.field) for e in caught.value.errors] == [(1, "score")]
    assert "minimum" in caught.value.errors[0].message
    after = run_of(bounded)
    assert row_counts() == counts
    assert (after.tokens_in, after.cost_usd, after.turn_count, after.best_score) == (
        before.tokens_in,
        before.cost_usd,
        before.turn_count,
        before.best_score,
    )


def test_scores_on_the_bounds_are_accepted(bounded):
    result = ingest(bounded, "r1", {"type": "score", "score": 0.0}, {"type": "score", "score": 1.0})
    assert result.accepted == 2


def test_a_database_failure_mid_batch_rolls_back_everything(project, monkeypatch):
    def explode(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(services.ingest, "_insert_scores", explode)
    with pytest.raises(RuntimeError):
        ingest(project, "r1", *MIXED)
    assert not Run.objects.exists()
    assert not MetricPoint.objects.exists() and not AgentTurn.objects.exists()


# --- idempotency --------------------------------------------------------------------------------


def test_replayed_batch_is_counted_as_duplicates(project):
    ingest(project, "r1", *MIXED)
    before = run_of(project)
    counts = row_counts()
    result = ingest(project, "r1", *MIXED)
    assert (result.accepted, result.duplicates) == (0, len(MIXED))
    after = run_of(project)
    assert row_counts() == counts
    assert after.last_progress_at == before.last_progress_at  # a replay is not progress
    assert (after.tokens_in, after.cost_usd, after.turn_count, after.score_count, after.state) == (
        before.tokens_in,
        before.cost_usd,
        before.turn_count,
        before.score_count,
        before.state,
    )


def test_duplicates_inside_one_batch_are_written_once(project):
    metric = {"type": "metric", "id": "m1", "key": "loss", "value": 1.0}
    turn = {"type": "agent.turn", "id": "t1", "turn": 1, "tokens_in": 10, "cost_usd": 1}
    result = ingest(project, "r1", metric, turn, metric, turn, metric)
    assert (result.accepted, result.duplicates) == (2, 3)
    run = run_of(project)
    assert MetricPoint.objects.filter(run=run).count() == 1
    assert (run.turn_count, run.tokens_in, run.cost_usd) == (1, 10, Decimal("1"))


def test_an_id_seen_before_with_other_content_is_still_a_duplicate(project):
    ingest(project, "r1", {"type": "metric", "id": "m1", "key": "loss", "value": 1.0})
    result = ingest(project, "r1", {"type": "metric", "id": "m1", "key": "loss", "value": 2.0})
    assert (result.accepted, result.duplicates) == (0, 1)
    assert list(MetricPoint.objects.values_list("value", flat=True)) == [1.0]


def test_events_without_id_are_deduplicated_by_content(project):
    a = {"type": "metric", "key": "loss", "value": 1.0, "step": 1, "ts": at(0)}
    b = {**a, "value": 2.0}
    first = ingest(project, "r1", a, a, b)
    assert (first.accepted, first.duplicates) == (2, 1)
    again = ingest(project, "r1", dict(reversed(a.items())), b)  # same content, other key order
    assert (again.accepted, again.duplicates) == (0, 2)
    assert sorted(MetricPoint.objects.values_list("value", flat=True)) == [1.0, 2.0]
    assert all(e.startswith("h:") for e in MetricPoint.objects.values_list("event_id", flat=True))


def test_agent_turn_with_a_new_id_but_the_same_actor_and_turn_is_a_duplicate(project):
    ingest(project, "r1", {"type": "agent.turn", "id": "t1", "turn": 4, "tokens_in": 100, "cost_usd": 1})
    result = ingest(
        project,
        "r1",
        {"type": "agent.turn", "id": "t1-retry", "turn": 4, "tokens_in": 100, "cost_usd": 1},
        {
            "type": "agent.turn",
            "id": "t1-other",
            "turn": 4,
            "actor": "w1",
            "parent_actor": "driver",
            "tokens_in": 7,
        },
    )
    assert (result.accepted, result.duplicates) == (1, 1)
    run = run_of(project)
    assert run.turn_count == 2
    assert (run.tokens_in, run.driver_tokens_in, run.child_tokens_in) == (107, 100, 7)
    assert set(AgentTurn.objects.values_list("actor", "turn")) == {("driver", 4), ("w1", 4)}


def test_same_actor_and_turn_twice_in_one_batch_is_written_once(project):
    result = ingest(
        project,
        "r1",
        {"type": "agent.turn", "id": "a", "turn": 1, "tokens_in": 5},
        {"type": "agent.turn", "id": "b", "turn": 1, "tokens_in": 5},
    )
    assert (result.accepted, result.duplicates) == (1, 1)
    assert run_of(project).tokens_in == 5


def test_ids_are_unique_per_run_not_per_project(project):
    ingest(project, "r1", {"type": "metric", "id": "m1", "key": "loss", "value": 1.0})
    result = ingest(project, "r2", {"type": "metric", "id": "m1", "key": "loss", "value": 1.0})
    assert (result.accepted, result.duplicates) == (1, 0)


def test_checkpoints_are_keyed_by_their_id(project):
    ingest(project, "r1", {"type": "checkpoint", "id": "cp-1", "label": "first", "commit": "aaa"})
    result = ingest(
        project,
        "r1",
        {"type": "checkpoint", "id": "cp-1", "label": "renamed"},
        {
            "type": "checkpoint",
            "id": "cp-2",
            "label": "second",
            "restorable": False,
            "failure_reason": "dirty",
        },
    )
    assert (result.accepted, result.duplicates) == (1, 1)
    checkpoints = {c.external_id: c for c in Checkpoint.objects.filter(run=run_of(project))}
    assert set(checkpoints) == {"cp-1", "cp-2"}
    assert (checkpoints["cp-1"].label, checkpoints["cp-1"].commit) == ("first", "aaa")
    assert (checkpoints["cp-2"].restorable, checkpoints["cp-2"].failure_reason) == (False, "dirty")


# --- messages, experiments ----------------------------------------------------------------------


def test_messages_get_increasing_sequence_numbers_across_batches(project):
    ingest(
        project,
        "r1",
        {"type": "message", "id": "a", "body": "one"},
        {"type": "message", "id": "b", "body": "two"},
    )
    ingest(
        project,
        "r1",
        {"type": "message", "id": "b", "body": "two"},
        {"type": "message", "id": "c", "body": "three"},
    )
    ingest(project, "r2", {"type": "message", "id": "x", "body": "other run"})
    rows = list(RuntimeMessage.objects.filter(run=run_of(project)).values_list("seq", "body"))
    assert rows == [(1, "one"), (2, "two"), (3, "three")]
    assert list(RuntimeMessage.objects.filter(run=run_of(project, "r2")).values_list("seq", flat=True)) == [1]


def test_score_experiments_are_created_once_and_reused(project):
    ingest(
        project,
        "r1",
        {"type": "score", "id": "s1", "score": 1, "experiment": "e1"},
        {"type": "score", "id": "s2", "score": 2, "experiment": "e1"},
    )
    ingest(
        project,
        "r1",
        {"type": "score", "id": "s3", "score": 3, "experiment": "e1"},
        {"type": "score", "id": "s4", "score": 4},
    )
    run = run_of(project)
    [experiment] = Experiment.objects.filter(run=run)
    assert experiment.external_id == "e1"
    assert Submission.objects.filter(run=run, experiment=experiment).count() == 3
    assert Submission.objects.get(run=run, event_id="s4").experiment is None


# --- submissions and artifacts ------------------------------------------------------------------


def test_each_score_event_is_one_submission_with_its_fields(project):
    ingest(
        project,
        "r1",
        {
            "type": "score",
            "id": "s1",
            "score": 0.5,
            "harness_id": "h1",
            "commit": "c0ffee",
            "details": {"passed": 3},
            "ts": at(5),
        },
        {"type": "score", "id": "s2", "score": 0.6},
    )
    subs = {s.event_id: s for s in Submission.objects.filter(run=run_of(project))}
    assert set(subs) == {"s1", "s2"}
    s1 = subs["s1"]
    assert (s1.project, s1.score, s1.harness_id, s1.commit, s1.details, s1.ts) == (
        project,
        0.5,
        "h1",
        "c0ffee",
        {"passed": 3},
        T0 + timedelta(minutes=5),
    )
    assert s1.artifact is None and s1.status == "candidate"


def store(project, run_id, data: bytes, path="solution.py", **kwargs):
    return services.store_artifact(project, run_id, path=path, content=io.BytesIO(data), **kwargs)


def test_a_score_naming_an_uploaded_artifact_by_sha256_is_linked(project):
    artifact, _ = store(project, "r1", b"print('v1')")
    ingest(project, "r1", {"type": "score", "id": "s1", "score": 1, "artifact": artifact.sha256})
    submission = Submission.objects.get(event_id="s1")
    assert submission.artifact == artifact
    assert submission.artifact_ref == artifact.sha256


def test_a_score_naming_an_artifact_path_is_linked_to_its_latest_version(project):
    store(project, "r1", b"v1", path="model.onnx")
    v2, _ = store(project, "r1", b"v2", path="model.onnx")
    ingest(project, "r1", {"type": "score", "id": "s1", "score": 1, "artifact": "model.onnx"})
    assert Submission.objects.get(event_id="s1").artifact == v2


def test_a_score_does_not_link_another_runs_artifact(project):
    artifact, _ = store(project, "r-other", b"bytes")
    ingest(project, "r1", {"type": "score", "id": "s1", "score": 1, "artifact": artifact.sha256})
    assert Submission.objects.get(event_id="s1").artifact is None


def test_an_artifact_uploaded_after_its_score_is_linked_then(project):
    data = b"def solve(): return 42\n"
    sha = hashlib.sha256(data).hexdigest()
    ingest(
        project,
        "r1",
        {"type": "score", "id": "by-sha", "score": 1, "artifact": sha},
        {"type": "score", "id": "by-path", "score": 2, "artifact": "late.py"},
        {"type": "score", "id": "unrelated", "score": 3, "artifact": "other.py"},
    )
    assert not Submission.objects.filter(artifact__isnull=False).exists()
    artifact, created = store(project, "r1", data, path="late.py")
    assert created
    links = dict(Submission.objects.values_list("event_id", "artifact"))
    assert links == {"by-sha": artifact.pk, "by-path": artifact.pk, "unrelated": None}


# --- state ----------------------------------------------------------------------------------------


def test_state_is_the_latest_by_timestamp_whatever_the_arrival_order(project):
    ingest(project, "r1", {"type": "state", "id": "b", "state": "reviewing", "ts": at(20)})
    ingest(project, "r1", {"type": "state", "id": "a", "state": "planning", "ts": at(10)})
    run = run_of(project)
    assert run.state == RunState.REVIEWING
    assert run.finished_at is None


def test_a_terminal_state_sets_finished_at_and_the_failure(project):
    ingest(
        project,
        "r1",
        {"type": "state", "id": "a", "state": "running", "ts": at(0)},
        {
            "type": "state",
            "id": "b",
            "state": "failed",
            "ts": at(30),
            "failure": {"family": "oom", "detail": "killed at step 9", "source": "worker-2"},
        },
    )
    run = run_of(project)
    assert run.state == RunState.FAILED
    assert run.finished_at == T0 + timedelta(minutes=30)
    assert (run.failure_family, run.failure_detail, run.failure_source) == (
        "oom",
        "killed at step 9",
        "worker-2",
    )


def test_a_late_arriving_older_state_does_not_reopen_a_finished_run(project):
    ingest(project, "r1", {"type": "state", "id": "done", "state": "done", "ts": at(60)})
    ingest(project, "r1", {"type": "state", "id": "run", "state": "running", "ts": at(5)})
    run = run_of(project)
    assert run.state == RunState.DONE
    assert run.finished_at == T0 + timedelta(minutes=60)


def test_a_newer_live_state_clears_finished_at_and_failure(project):
    ingest(
        project,
        "r1",
        {
            "type": "state",
            "id": "f",
            "state": "failed",
            "ts": at(10),
            "failure": {"family": "crash", "detail": "segfault"},
        },
    )
    ingest(project, "r1", {"type": "state", "id": "r", "state": "running", "ts": at(20)})
    run = run_of(project)
    assert run.state == RunState.RUNNING
    assert run.finished_at is None
    assert (run.failure_family, run.failure_detail) == ("", "")


def test_state_events_are_order_independent_across_every_arrival_order(project):
    states = [
        {"type": "state", "id": f"s{i}", "state": s, "ts": at(i)}
        for i, s in enumerate(["queued", "planning", "executing", "stopped"])
    ]
    for n, order in enumerate([[0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1]]):
        for i in order:
            ingest(project, f"run-{n}", states[i])
        run = run_of(project, f"run-{n}")
        assert (run.state, run.finished_at) == (RunState.STOPPED, T0 + timedelta(minutes=3))


def test_news_clears_the_stalled_flag_and_moves_last_progress(project, time_machine):
    time_machine.move_to(T0)
    ingest(project, "r1", {"type": "metric", "id": "m1", "key": "k", "value": 1})
    [flagged] = services.flag_stalled_runs(now=T0 + timedelta(hours=1))
    assert run_of(project).stalled_since is not None
    time_machine.move_to(T0 + timedelta(hours=2))
    ingest(project, "r1", {"type": "metric", "id": "m2", "key": "k", "value": 2})
    run = run_of(project)
    assert run.stalled_since is None and not run.is_stalled
    assert run.last_progress_at >= T0 + timedelta(hours=2)


# --- score summaries ------------------------------------------------------------------------------


def test_best_and_latest_score_follow_a_maximize_scenario(project):
    ingest(
        project,
        "r1",
        {"type": "score", "id": "a", "score": 0.9, "ts": at(1)},
        {"type": "score", "id": "c", "score": 0.5, "ts": at(3)},
    )
    ingest(
        project, "r1", {"type": "score", "id": "b", "score": 0.2, "ts": at(2)}
    )  # arrives last, is not latest
    run = run_of(project)
    assert (run.best_score, run.latest_score, run.score_count) == (0.9, 0.5, 3)


def test_best_and_latest_score_follow_a_minimize_scenario(minimize):
    ingest(
        minimize,
        "r1",
        {"type": "score", "id": "a", "score": 12.0, "ts": at(1)},
        {"type": "score", "id": "b", "score": 3.5, "ts": at(2)},
        {"type": "score", "id": "c", "score": 7.0, "ts": at(3)},
    )
    run = run_of(minimize)
    assert (run.best_score, run.latest_score, run.score_count) == (3.5, 7.0, 3)


# --- spend ----------------------------------------------------------------------------------------


def test_spend_is_split_by_turn_kind_and_totals_are_exact_decimals(project):
    ingest(
        project,
        "r1",
        {"type": "agent.turn", "id": "d1", "turn": 1, "tokens_in": 1000, "tokens_out": 100, "cost_usd": 0.1},
        {"type": "agent.turn", "id": "d2", "turn": 2, "tokens_in": 2000, "tokens_out": 200, "cost_usd": 0.2},
        {
            "type": "agent.turn",
            "id": "c1",
            "turn": 1,
            "actor": "w",
            "parent_actor": "driver",
            "tokens_in": 30,
            "tokens_out": 3,
            "cost_usd": 0.000001,
        },
        {"type": "agent.turn", "id": "c2", "turn": 3, "kind": "child_work", "tokens_in": 7, "cost_usd": 0.3},
    )
    run = run_of(project)
    assert (run.driver_tokens_in, run.driver_tokens_out, run.driver_cost_usd) == (3000, 300, Decimal("0.3"))
    assert (run.child_tokens_in, run.child_tokens_out, run.child_cost_usd) == (37, 3, Decimal("0.300001"))
    assert (run.tokens_in, run.tokens_out, run.cost_usd, run.turn_count) == (
        3037,
        303,
        Decimal("0.600001"),
        4,
    )


def _turn_event(
    i: int, actor: str, kind: str, tokens_in: int, tokens_out: int, cost: Decimal, with_id: bool
) -> dict:
    event = {
        "type": "agent.turn",
        "turn": i,
        "actor": actor,
        "kind": kind,
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        "cost_usd": float(cost),
        "ts": at(i),
    }
    if actor != "driver":
        event["parent_actor"] = "driver"
    if with_id:
        event["id"] = f"turn-{i}"
    return event


turn_specs = st.lists(
    st.tuples(
        st.sampled_from(["driver", "w1", "w2"]),
        st.sampled_from([TurnKind.DRIVER_INFERENCE.value, TurnKind.CHILD_WORK.value]),
        st.integers(0, 10**9),
        st.integers(0, 10**9),
        st.decimals(min_value=0, max_value=1000, places=6, allow_nan=False, allow_infinity=False),
        st.booleans(),
    ),
    min_size=1,
    max_size=25,
)

_example = iter(range(10**9))


@hsettings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=turn_specs, seed=st.integers(0, 2**32 - 1))
def test_spend_equals_the_sum_of_turns_whatever_batching_order_and_duplication(project, specs, seed):
    rnd = random.Random(seed)
    unique = [_turn_event(i, *spec) for i, spec in enumerate(specs)]
    # Retries: whole events again, and the same turn re-sent under a fresh id (still the same turn).
    sent = list(unique)
    for event in rnd.sample(unique, k=rnd.randint(0, len(unique))):
        sent.append({**event, "id": f"retry-{rnd.random()}"} if rnd.random() < 0.5 else event)
    rnd.shuffle(sent)
    cuts = (
        sorted(rnd.sample(range(1, len(sent)), k=min(len(sent) - 1, rnd.randint(0, 5))))
        if len(sent) > 1
        else []
    )
    batches = [sent[a:b] for a, b in zip([0, *cuts], [*cuts, len(sent)], strict=True)]
    batches += rnd.sample(batches, k=rnd.randint(0, len(batches)))  # whole batches replayed
    rnd.shuffle(batches)

    n = next(_example)
    run_id, once_id = f"prop-{n}", f"once-{n}"
    accepted = sum(ingest(project, run_id, *batch).accepted for batch in batches)
    ingest(project, once_id, *unique)

    run, once = run_of(project, run_id), run_of(project, once_id)
    turns = AgentTurn.objects.filter(run=run)
    sums = turns.aggregate(tin=Sum("tokens_in"), tout=Sum("tokens_out"), usd=Sum("cost_usd"))
    expected_usd = sum((s[4] for s in specs), Decimal(0))
    driver = [s for s in specs if s[1] == TurnKind.DRIVER_INFERENCE]

    assert accepted == len(unique) == run.turn_count == turns.count()
    assert (
        run.tokens_in == run.driver_tokens_in + run.child_tokens_in == sums["tin"] == sum(s[2] for s in specs)
    )
    assert (
        run.tokens_out
        == run.driver_tokens_out + run.child_tokens_out
        == sums["tout"]
        == sum(s[3] for s in specs)
    )
    assert run.cost_usd == run.driver_cost_usd + run.child_cost_usd == sums["usd"] == expected_usd
    assert run.driver_tokens_in == sum(s[2] for s in driver)
    assert run.driver_cost_usd == sum((s[4] for s in driver), Decimal(0))
    fields = [*Run.SPEND_FIELDS, "turn_count"]
    assert {f: getattr(run, f) for f in fields} == {f: getattr(once, f) for f in fields}


# --- run settings -----------------------------------------------------------------------------------


def test_run_settings_create_the_run_and_are_audited(project, alice):
    run = services.update_run_settings(
        project,
        "r-new",
        by=alice,
        budget_usd=Decimal("12.5"),
        budget_tokens=10**6,
        requested_profile="large",
        actual_profile="small",
    )
    run.refresh_from_db()
    assert (run.budget_usd, run.budget_tokens, run.is_downgraded) == (Decimal("12.5"), 10**6, True)
    audit = AuditEvent.objects.get(verb="run.settings_changed")
    assert (audit.actor, audit.object_id, audit.detail["budget_usd"]) == (alice, str(run.pk), "12.5")


def test_an_unknown_run_setting_is_refused(project):
    with pytest.raises(InvalidInput) as caught:
        services.update_run_settings(project, "r1", state="done")
    assert caught.value.field == "state"
    assert not Run.objects.exists()


# --- artifacts ------------------------------------------------------------------------------------


def files_under(root) -> list:
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def test_the_same_bytes_are_stored_once_across_runs(project, artifact_root):
    data = b"\x00\x01binary model\xff" * 100
    a1, created1 = store(project, "r1", data, path="model.bin")
    a2, created2 = store(project, "r2", data, path="renamed.bin")
    assert created1 and created2
    assert a1.pk != a2.pk and a1.blob_id == a2.blob_id
    assert ArtifactBlob.objects.count() == 1
    [stored] = files_under(artifact_root)
    assert stored.read_bytes() == data
    assert stored.name.startswith(a1.sha256 + "-")
    assert a1.sha256 == hashlib.sha256(data).hexdigest()
    assert a1.size == len(data)


def test_the_same_bytes_at_the_same_path_of_a_run_are_one_artifact(project):
    first, created = store(project, "r1", b"abc")
    again, created_again = store(project, "r1", b"abc")
    assert created and not created_again
    assert first.pk == again.pk
    assert Artifact.objects.count() == 1
    assert AuditEvent.objects.filter(verb="artifact.stored").count() == 1


def test_stored_bytes_read_back_exactly(project):
    data = bytes(range(256)) * 50
    artifact, _ = store(project, "r1", data)
    with services.open_blob(artifact.blob) as fh:
        assert fh.read() == data


def test_a_sha256_mismatch_raises_and_stores_nothing(project, artifact_root):
    with pytest.raises(DigestMismatch) as caught:
        store(project, "r1", b"real bytes", claimed_sha256="0" * 64)
    assert "nothing was stored" in caught.value.message
    assert not ArtifactBlob.objects.exists() and not Artifact.objects.exists()
    assert not Run.objects.exists()
    assert files_under(artifact_root) == []


def test_a_matching_claimed_sha256_is_accepted_in_any_case(project):
    data = b"checked"
    digest = hashlib.sha256(data).hexdigest()
    artifact, created = store(project, "r1", data, claimed_sha256=digest.upper())
    assert created and artifact.sha256 == digest


def test_a_malformed_claimed_sha256_is_refused(project):
    with pytest.raises(InvalidInput) as caught:
        store(project, "r1", b"x", claimed_sha256="abc")
    assert caught.value.field == "sha256"


@pytest.mark.parametrize("path", ["", "p" * 501])
def test_an_artifact_path_must_be_1_to_500_characters(project, path):
    with pytest.raises(InvalidInput) as caught:
        store(project, "r1", b"x", path=path)
    assert caught.value.field == "path"


def test_an_artifact_for_an_invalid_run_id_is_refused_before_anything_is_stored(project, artifact_root):
    with pytest.raises(InvalidInput) as caught:
        store(project, "r" * 201, b"orphan?")
    assert caught.value.field == "run"
    assert not ArtifactBlob.objects.exists() and not Run.objects.exists()
    assert files_under(artifact_root) == []


def test_an_artifact_over_the_size_limit_is_refused_and_not_stored(project, settings, artifact_root):
    settings.SMRWEB_MAX_ARTIFACT_BYTES = 16
    artifact, _ = store(project, "r1", b"x" * 16)  # exactly the limit is fine
    assert artifact.size == 16
    with pytest.raises(ArtifactTooLarge):
        store(project, "r1", b"y" * 17, path="big.bin")
    assert ArtifactBlob.objects.count() == 1
    assert len(files_under(artifact_root)) == 1


def test_storing_an_artifact_is_audited_and_is_progress(project, alice):
    ingest(project, "r1", {"type": "metric", "id": "m", "key": "k", "value": 1})
    services.flag_stalled_runs(now=datetime.now(UTC) + timedelta(days=1))
    assert run_of(project).stalled_since is not None
    artifact, _ = store(project, "r1", b"data", by=alice)
    assert run_of(project).stalled_since is None
    audit = AuditEvent.objects.get(verb="artifact.stored")
    assert (audit.actor, audit.project, audit.detail["sha256"], audit.detail["size"]) == (
        alice,
        project,
        artifact.sha256,
        4,
    )


# --- stalled runs ---------------------------------------------------------------------------------


def test_a_run_without_progress_for_stall_after_is_flagged_and_audited(project, time_machine):
    time_machine.move_to(T0, tick=False)
    ingest(project, "quiet", {"type": "metric", "id": "m", "key": "k", "value": 1})
    time_machine.move_to(T0 + project.stall_after - timedelta(seconds=1), tick=False)
    assert services.flag_stalled_runs() == []
    time_machine.move_to(T0 + project.stall_after + timedelta(seconds=1), tick=False)
    [flagged] = services.flag_stalled_runs()
    assert flagged.external_id == "quiet"
    run = run_of(project, "quiet")
    assert run.stalled_since == T0 + project.stall_after + timedelta(seconds=1)
    assert run.is_stalled
    audit = AuditEvent.objects.get(verb="run.stalled")
    assert (audit.actor_label, audit.project, audit.object_id) == ("system", project, str(run.pk))


def test_a_stalled_run_is_flagged_only_once(project):
    ingest(project, "r1", {"type": "metric", "id": "m", "key": "k", "value": 1})
    later = datetime.now(UTC) + timedelta(days=1)
    assert len(services.flag_stalled_runs(now=later)) == 1
    assert services.flag_stalled_runs(now=later + timedelta(hours=1)) == []
    assert run_of(project).stalled_since == later
    assert AuditEvent.objects.filter(verb="run.stalled").count() == 1


@pytest.mark.parametrize("state", ["done", "failed", "stopped", "canceled"])
def test_terminal_runs_are_never_flagged(project, state):
    ingest(project, "finished", {"type": "state", "id": "s", "state": state})
    ingest(project, "live", {"type": "state", "id": "s", "state": "running"})
    flagged = services.flag_stalled_runs(now=datetime.now(UTC) + timedelta(days=30))
    assert [r.external_id for r in flagged] == ["live"]
    assert run_of(project, "finished").stalled_since is None


def test_each_project_uses_its_own_stall_after(project, other_project):
    project.stall_after = timedelta(minutes=1)
    project.save()
    Run.objects.create(project=project, external_id="short", last_progress_at=T0)
    Run.objects.create(project=other_project, external_id="default", last_progress_at=T0)
    flagged = services.flag_stalled_runs(now=T0 + timedelta(minutes=5))
    assert [r.external_id for r in flagged] == ["short"]
    assert other_project.stall_after > timedelta(minutes=5)


def test_a_score_naming_its_artifact_by_an_uppercase_digest_is_linked(project):
    import hashlib

    content = b"weights"
    digest = hashlib.sha256(content).hexdigest()
    services.ingest_events(
        project,
        "up",
        ev.parse_events(json.dumps([{"type": "score", "score": 1, "artifact": digest.upper()}])),
    )
    artifact, _ = services.store_artifact(project, "up", path="m.onnx", content=io.BytesIO(content))
    assert Submission.objects.get(run__external_id="up").artifact == artifact


def test_run_ids_with_a_slash_are_refused(project):
    with pytest.raises(InvalidInput):
        services.ingest_events(
            project, "a/b", ev.parse_events(b'[{"type": "metric", "key": "k", "value": 1}]')
        )


def test_a_crashed_write_never_leaves_a_blob_row_pointing_at_partial_bytes(
    project, artifact_root, monkeypatch
):
    storage = services.artifact_storage()
    real_save = storage.save

    def save_half_then_crash(name, content, **kwargs):
        real_save(name, io.BytesIO(content.read(3)))
        raise OSError("disk full")

    monkeypatch.setattr(storage, "save", save_half_then_crash)
    with pytest.raises(OSError):
        store(project, "r1", b"complete bytes", path="m.bin")
    assert not ArtifactBlob.objects.exists()
    monkeypatch.setattr(storage, "save", real_save)

    artifact, _ = store(project, "r1", b"complete bytes", path="m.bin")
    with services.open_blob(artifact.blob) as f:
        assert f.read() == b"complete bytes"
