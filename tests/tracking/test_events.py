"""The ingest contract's validator: `events.parse_events` accepts every event type and names the event
index and field of every problem. Pure parsing, no database."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from smrweb.tracking import events as ev
from smrweb.tracking.errors import InvalidEvents
from smrweb.tracking.models import RunState, TurnKind


def body(*events) -> bytes:
    return json.dumps(list(events)).encode()


def errors_of(raw: bytes | str) -> list[dict]:
    with pytest.raises(InvalidEvents) as caught:
        ev.parse_events(raw)
    payload = caught.value.as_dict()
    assert payload["code"] == "invalid_events"
    assert "nothing was written" in payload["message"]
    return payload["errors"]


METRIC = {"type": "metric", "key": "loss", "value": 0.5, "step": 3}


# --- valid events -------------------------------------------------------------------------------


def test_metric_event_is_parsed_with_its_fields():
    [event] = ev.parse_events(body({**METRIC, "id": "m1", "ts": "2024-05-01T12:00:00Z"}))
    assert isinstance(event, ev.PlainMetric)  # the common shape: the fast path (test_plain_metrics.py)
    assert (event.id, event.key, event.value, event.step) == ("m1", "loss", 0.5, 3)
    assert event.ts == datetime(2024, 5, 1, 12, tzinfo=UTC)


def test_metric_step_defaults_to_zero_and_integer_value_is_a_float():
    [event] = ev.parse_events(body({"type": "metric", "key": "acc", "value": 1}))
    assert event.step == 0
    assert event.value == 1.0 and isinstance(event.value, float)


def test_score_event_is_parsed_with_its_fields():
    [event] = ev.parse_events(
        body(
            {
                "type": "score",
                "harness_id": "h-1",
                "score": 0.87,
                "artifact": "a" * 64,
                "experiment": "exp-3",
                "commit": "abc123",
                "details": {"cases": 12, "notes": ["x"]},
            }
        )
    )
    assert isinstance(event, ev.ScoreEvent)
    assert (event.harness_id, event.score, event.artifact, event.experiment, event.commit) == (
        "h-1",
        0.87,
        "a" * 64,
        "exp-3",
        "abc123",
    )
    assert event.details == {"cases": 12, "notes": ["x"]}


def test_agent_turn_event_is_parsed_with_its_fields():
    [event] = ev.parse_events(
        body(
            {
                "type": "agent.turn",
                "turn": 7,
                "actor": "worker-1",
                "parent_actor": "driver",
                "kind": "child_work",
                "model": "m-large",
                "tokens_in": 1200,
                "tokens_out": 340,
                "cost_usd": 0.0123,
                "tool_calls": ["bash", {"name": "edit", "file": "a.py"}],
                "duration_ms": 4500,
            }
        )
    )
    assert isinstance(event, ev.TurnEvent)
    assert (event.turn, event.actor, event.parent_actor, event.model) == (7, "worker-1", "driver", "m-large")
    assert (event.tokens_in, event.tokens_out, event.duration_ms) == (1200, 340, 4500)
    assert event.resolved_kind == TurnKind.CHILD_WORK
    assert event.cost_decimal == Decimal("0.012300")
    assert event.tool_calls == ["bash", {"name": "edit", "file": "a.py"}]


def test_agent_turn_defaults_to_the_driver_actor_and_driver_inference():
    [event] = ev.parse_events(body({"type": "agent.turn", "turn": 0}))
    assert event.actor == "driver"
    assert event.resolved_kind == TurnKind.DRIVER_INFERENCE
    # No cost stated: None (the write path prices it, or records it as free when it has no tokens).
    assert (event.tokens_in, event.tokens_out, event.cost_decimal) == (0, 0, None)


def test_agent_turn_kind_defaults_to_child_work_when_a_parent_actor_is_named():
    [event] = ev.parse_events(
        body({"type": "agent.turn", "turn": 1, "actor": "sub", "parent_actor": "driver"})
    )
    assert event.resolved_kind == TurnKind.CHILD_WORK


def test_turn_cost_keeps_its_decimal_value_exactly():
    [event] = ev.parse_events(body({"type": "agent.turn", "turn": 1, "cost_usd": 0.1}))
    assert event.cost_decimal == Decimal("0.1")


def test_state_event_is_parsed_with_its_failure():
    [event] = ev.parse_events(
        body(
            {
                "type": "state",
                "state": "failed",
                "failure": {"family": "oom", "detail": "killed", "source": "worker"},
            }
        )
    )
    assert isinstance(event, ev.StateEvent)
    assert event.state == RunState.FAILED
    assert (event.failure.family, event.failure.detail, event.failure.source) == ("oom", "killed", "worker")


def test_message_event_is_parsed_with_its_fields():
    [event] = ev.parse_events(
        body(
            {
                "type": "message",
                "topic": "plan",
                "target": "driver",
                "mode": "steer",
                "body": "try a smaller model",
            }
        )
    )
    assert isinstance(event, ev.MessageEvent)
    assert (event.topic, event.target, event.mode, event.body) == (
        "plan",
        "driver",
        "steer",
        "try a smaller model",
    )


def test_checkpoint_event_is_parsed_with_its_fields():
    [event] = ev.parse_events(
        body(
            {
                "type": "checkpoint",
                "id": "cp-1",
                "label": "before refactor",
                "commit": "deadbeef",
                "restorable": False,
                "failure_reason": "dirty tree",
            }
        )
    )
    assert isinstance(event, ev.CheckpointEvent)
    assert (event.id, event.label, event.commit, event.restorable, event.failure_reason) == (
        "cp-1",
        "before refactor",
        "deadbeef",
        False,
        "dirty tree",
    )


def test_a_mixed_batch_keeps_its_order():
    parsed = ev.parse_events(
        body(
            METRIC,
            {"type": "score", "score": 1},
            {"type": "agent.turn", "turn": 1},
            {"type": "state", "state": "done"},
            {"type": "message", "body": "hi"},
            {"type": "checkpoint", "id": "c"},
        )
    )
    assert [type(e) for e in parsed] == [
        ev.MetricEvent,
        ev.ScoreEvent,
        ev.TurnEvent,
        ev.StateEvent,
        ev.MessageEvent,
        ev.CheckpointEvent,
    ]


def test_an_empty_list_is_a_valid_batch():
    assert ev.parse_events(b"[]") == []


def test_a_timestamp_with_an_offset_keeps_its_instant():
    [event] = ev.parse_events(body({**METRIC, "ts": "2024-05-01T14:00:00+02:00"}))
    assert event.ts == datetime(2024, 5, 1, 12, tzinfo=UTC)


def test_a_timestamp_without_zone_is_taken_as_utc():
    [event] = ev.parse_events(body({**METRIC, "ts": "2024-05-01T12:00:00"}))
    assert event.ts == datetime(2024, 5, 1, 12, tzinfo=UTC)


def test_a_batch_of_exactly_5000_events_is_accepted():
    assert len(ev.parse_events(body(*[METRIC] * ev.MAX_EVENTS))) == 5000


# --- idempotency keys ---------------------------------------------------------------------------


def test_idempotency_key_is_the_client_id_when_sent():
    [event] = ev.parse_events(body({**METRIC, "id": "client-7"}))
    assert event.idempotency_key() == "client-7"


def test_events_without_id_and_the_same_content_share_a_digest_key():
    a, b, c = ev.parse_events(body(METRIC, dict(reversed(METRIC.items())), {**METRIC, "value": 0.6}))
    assert a.idempotency_key().startswith("h:")
    assert a.idempotency_key() == b.idempotency_key()
    assert a.idempotency_key() != c.idempotency_key()


# --- invalid batches ----------------------------------------------------------------------------


def test_malformed_json_is_one_batch_level_error():
    [error] = errors_of(b'[{"type": "metric",')
    assert error["index"] is None
    assert error["message"].startswith("Malformed JSON")


@pytest.mark.parametrize("raw", [b'{"type": "metric", "key": "a", "value": 1}', b'"events"', b"null", b"42"])
def test_a_body_that_is_not_a_list_is_refused(raw):
    [error] = errors_of(raw)
    assert error["index"] is None
    assert "JSON list" in error["message"]


def test_an_unknown_type_names_the_event_and_the_type_field():
    [error] = errors_of(body(METRIC, {"type": "telemetry", "x": 1}))
    assert (error["index"], error["field"]) == (1, "type")
    assert "Unknown event type 'telemetry'" in error["message"]
    assert "agent.turn" in error["message"]


def test_a_missing_type_names_the_event_and_the_type_field():
    [error] = errors_of(body(METRIC, METRIC, {"key": "loss", "value": 1}))
    assert (error["index"], error["field"]) == (2, "type")
    assert "Missing event type" in error["message"]


def test_an_event_that_is_not_an_object_names_its_index():
    [error] = errors_of(body(METRIC, "metric"))
    assert error["index"] == 1


@pytest.mark.parametrize(
    ("event", "field"),
    [
        ({"type": "metric", "value": 1}, "key"),
        ({"type": "metric", "key": "loss"}, "value"),
        ({"type": "score"}, "score"),
        ({"type": "agent.turn"}, "turn"),
        ({"type": "state"}, "state"),
        ({"type": "message"}, "body"),
    ],
)
def test_a_missing_required_field_is_named(event, field):
    [error] = errors_of(body(METRIC, event))
    assert (error["index"], error["field"]) == (1, field)
    assert error["message"] == "Field required"


@pytest.mark.parametrize(
    ("event", "field"),
    [
        ({"type": "metric", "key": "loss", "value": "0.5"}, "value"),  # a string for a number
        ({"type": "metric", "key": "loss", "value": 1, "step": "3"}, "step"),
        ({"type": "metric", "key": "loss", "value": 1, "step": 1.5}, "step"),
        ({"type": "metric", "key": 5, "value": 1}, "key"),
        ({"type": "agent.turn", "turn": "1"}, "turn"),
        ({"type": "agent.turn", "turn": 1, "tokens_in": "100"}, "tokens_in"),
        ({"type": "agent.turn", "turn": 1, "cost_usd": "0.5"}, "cost_usd"),
        ({"type": "agent.turn", "turn": 1, "kind": "thinking"}, "kind"),
        ({"type": "score", "score": 1, "details": []}, "details"),
        ({"type": "checkpoint", "restorable": "yes"}, "restorable"),
        ({"type": "state", "state": "exploded"}, "state"),
        ({"type": "state", "state": "failed", "failure": {"family": 3}}, "failure.family"),
        ({"type": "metric", "key": "loss", "value": 1, "ts": "yesterday"}, "ts"),
    ],
)
def test_a_mistyped_field_is_named(event, field):
    [error] = errors_of(body(event))
    assert (error["index"], error["field"]) == (0, field)
    assert error["message"]


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999", "-1e999"])
def test_non_finite_metric_values_are_refused(literal):
    first = '{"type": "metric", "key": "loss", "value": 1}'
    raw = f'[{first}, {{"type": "metric", "key": "loss", "value": {literal}}}]'
    [error] = errors_of(raw.encode())
    assert (error["index"], error["field"]) == (1, "value")
    assert "finite" in error["message"]


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "1e999"])
def test_non_finite_scores_and_costs_are_refused(literal):
    raw = (
        f'[{{"type": "score", "score": {literal}}}, '
        f'{{"type": "agent.turn", "turn": 1, "cost_usd": {literal}}}]'
    )
    errors = errors_of(raw.encode())
    assert {(e["index"], e["field"]) for e in errors} == {(0, "score"), (1, "cost_usd")}


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'[{"type": "score", "score": 1, "details": {"loss": NaN}}]', "details"),
        (b'[{"type": "score", "score": 1, "details": {"runs": [1, {"x": -Infinity}]}}]', "details"),
        (b'[{"type": "score", "score": 1, "details": {"x": 1e999}}]', "details"),
        (b'[{"type": "agent.turn", "turn": 1, "tool_calls": [{"name": "t", "ms": Infinity}]}]', "tool_calls"),
    ],
)
def test_non_finite_numbers_inside_free_form_json_are_refused(raw, field):
    # No database stores them in JSON: accepting them would fail at write time instead.
    [error] = errors_of(raw)
    assert (error["index"], error["field"]) == (0, field)
    assert "finite" in error["message"]


def test_finite_numbers_inside_free_form_json_are_kept():
    [event] = ev.parse_events(b'[{"type": "score", "score": 1, "details": {"x": 1e308, "n": [0.5, -2]}}]')
    assert event.details == {"x": 1e308, "n": [0.5, -2]}


@pytest.mark.parametrize("field", ["tokens_in", "tokens_out", "turn", "duration_ms", "cost_usd"])
def test_negative_turn_numbers_are_refused(field):
    [error] = errors_of(body({"type": "agent.turn", "turn": 1, field: -1}))
    assert (error["index"], error["field"]) == (0, field)
    assert "greater than or equal to 0" in error["message"]


def test_a_negative_step_is_refused():
    [error] = errors_of(body({**METRIC, "step": -1}))
    assert (error["index"], error["field"]) == (0, "step")


def test_extra_fields_are_refused_and_named():
    [error] = errors_of(body(METRIC, {**METRIC, "colour": "red"}))
    assert (error["index"], error["field"]) == (1, "colour")
    assert "Extra inputs" in error["message"]


def test_extra_fields_inside_a_failure_are_named_with_their_path():
    [error] = errors_of(body({"type": "state", "state": "failed", "failure": {"family": "x", "why": "y"}}))
    assert (error["index"], error["field"]) == (0, "failure.why")


def test_an_empty_id_is_refused():
    [error] = errors_of(body({**METRIC, "id": ""}))
    assert (error["index"], error["field"]) == (0, "id")


def test_more_than_5000_events_are_refused_as_a_batch():
    errors = errors_of(body(*[METRIC] * (ev.MAX_EVENTS + 1)))
    assert errors[0]["index"] is None
    assert "at most 5000 events" in errors[0]["message"]


def test_every_problem_of_a_batch_is_listed_with_its_index():
    errors = errors_of(
        body(
            METRIC,
            {"type": "metric", "key": "loss", "value": "high"},
            {"type": "agent.turn", "turn": 1, "tokens_out": -2},
            METRIC,
            {"type": "nope"},
        )
    )
    assert [(e["index"], e["field"]) for e in errors] == [(1, "value"), (2, "tokens_out"), (4, "type")]


def test_the_batch_schema_names_every_event_component():
    schema = ev.batch_json_schema()
    assert schema["type"] == "array"
    assert schema["maxItems"] == ev.MAX_EVENTS
    assert {"MetricEvent", "ScoreEvent", "TurnEvent", "StateEvent", "MessageEvent", "CheckpointEvent"} <= set(
        schema["$defs"]
    )
