"""Loop and no-progress detection (tracking/queries/progress.py) on crafted turn sequences."""

import json
from decimal import Decimal

import pytest

from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import LoopPattern
from smrweb.tracking.queries import progress
from smrweb.tracking.queries.progress import Call, call_identity, calls_of, find_loops


def seq(*names: str, tokens: int = 100, usd: str = "0.01") -> list[Call]:
    """One call per turn from turn 1; equal names are equal calls (same arguments)."""
    return [Call(i, f"{n}\x00{{}}", n, tokens, Decimal(usd)) for i, n in enumerate(names, start=1)]


def test_a_call_repeated_k_times_is_a_loop_with_what_the_repeats_cost():
    loops = find_loops(seq("plan", "grep", "grep", "grep", "grep", "edit"), repeats=3)
    assert len(loops) == 1
    loop = loops[0]
    assert loop.pattern == LoopPattern.REPEAT and loop.label == "grep"
    assert (loop.first_turn, loop.last_turn, loop.repeats) == (2, 5, 4)
    # The first call was work; the three after it are the waste.
    assert loop.wasted_tokens == 300 and loop.wasted_usd == Decimal("0.03")


def test_fewer_than_k_repeats_is_not_a_loop():
    assert find_loops(seq("grep", "grep", "edit", "grep", "grep"), repeats=3) == []


def test_ping_pong_a_b_a_b_is_a_loop_once_the_pair_repeats_k_times():
    calls = seq("read", "test", "edit", "test", "edit", "test", "edit", "commit")
    loops = find_loops(calls, repeats=3)
    assert [(lp.pattern, lp.first_turn, lp.last_turn, lp.repeats) for lp in loops] == [
        (LoopPattern.PING_PONG, 2, 7, 6)
    ]
    assert loops[0].label == "test ⇄ edit"
    assert loops[0].wasted_tokens == 400  # turns 4–7, after the first test-edit cycle
    # Two cycles are not three.
    assert find_loops(seq("test", "edit", "test", "edit"), repeats=3) == []
    assert len(find_loops(seq("test", "edit", "test", "edit"), repeats=2)) == 1


def test_a_healthy_agent_is_not_looping():
    """Varied calls, a file read twice, an edit-test cycle that moves on: nothing to report."""
    healthy = seq(
        "ls", "read", "read", "edit", "test", "edit", "test", "read", "grep", "edit", "test", "commit", "plan"
    )
    assert find_loops(healthy, repeats=3) == []


def test_same_tool_with_different_arguments_is_not_the_same_call():
    entries = [{"name": "search", "arguments": {"q": f"term {i}"}} for i in range(6)]
    calls = calls_of((i, [e], 10, Decimal(0)) for i, e in enumerate(entries))
    assert find_loops(calls, repeats=3) == []
    same = calls_of((i, [{"name": "search", "arguments": {"q": "x"}}], 10, Decimal(0)) for i in range(4))
    assert [lp.repeats for lp in find_loops(same, repeats=3)] == [4]


@pytest.mark.parametrize(
    "entry",
    [
        {"name": "bash", "arguments": {"cmd": "pytest -x", "cwd": "/w"}},
        {"name": "bash", "arguments": '{"cwd": "/w", "cmd": "pytest -x"}'},  # a JSON string, keys reordered
        {"tool": "bash", "args": {"cwd": "/w", "cmd": "pytest -x"}},
        {"type": "function", "function": {"name": "bash", "arguments": '{"cmd":"pytest -x","cwd":"/w"}'}},
        {"tool_name": "bash", "input": {"cmd": "pytest -x", "cwd": "/w"}},
    ],
)
def test_every_plausible_shape_of_a_tool_call_reads_as_the_same_call(entry):
    key, label = call_identity(entry)
    assert key == call_identity({"name": "bash", "parameters": {"cwd": "/w", "cmd": "pytest -x"}})[0]
    assert label.startswith("bash(")


def test_calls_known_by_name_alone_cannot_be_told_equal_so_never_loop():
    """A source that records only the tool's name (the arguments may differ every time) is not looping
    just because it reads files often; an explicit empty argument list does compare."""
    assert call_identity("read_file") == (None, "read_file")
    assert call_identity({"name": "read_file"}) == (None, "read_file")
    names = calls_of((i, ["read_file"], 10, Decimal(0)) for i in range(10))
    assert len(names) == 10 and find_loops(names) == []
    empty = calls_of((i, [{"name": "list_jobs", "arguments": {}}], 10, Decimal(0)) for i in range(4))
    assert [lp.repeats for lp in find_loops(empty)] == [4]


def test_unreadable_entries_never_make_a_loop():
    assert call_identity({"arguments": {"x": 1}}) is None  # no name
    assert call_identity(42) is None
    assert call_identity("") is None
    calls = calls_of((i, [{"arguments": {}}, 7, None], 1, Decimal(0)) for i in range(10))
    assert calls == [] and find_loops(calls) == []


def test_turns_without_calls_do_not_break_a_repetition():
    grep = {"name": "grep", "arguments": {"q": "x"}}
    rows = [
        (1, [grep], 1, Decimal(0)),
        (2, [], 1, Decimal(0)),
        (3, [grep], 1, Decimal(0)),
        (4, [grep], 1, Decimal(0)),
    ]
    assert [lp.repeats for lp in find_loops(calls_of(rows), repeats=3)] == [3]


def _ingest(project, run_id, *events):
    services.ingest_events(project, run_id, parse_events(json.dumps(list(events))))


def turn(n: int, *, cost: float = 0.01, tokens: int = 100, ts: str | None = None, calls=None) -> dict:
    event = {
        "type": "agent.turn",
        "turn": n,
        "tokens_in": tokens,
        "cost_usd": cost,
        "tool_calls": calls or [],
    }
    if ts:
        event["ts"] = ts
    return event


def test_progress_counts_turns_and_spend_since_the_best_score(project):
    _ingest(
        project,
        "r",
        {"type": "score", "score": 0.5, "ts": "2026-01-01T00:00:00Z"},
        turn(1, ts="2026-01-01T00:00:01Z"),
        {"type": "score", "score": 0.8, "ts": "2026-01-01T00:00:02Z"},
        *[turn(n, ts=f"2026-01-01T00:01:{n:02d}Z") for n in range(2, 12)],
        {"type": "score", "score": 0.6, "ts": "2026-01-01T00:02:00Z"},  # worse: no progress
    )
    run = project.runs.get(external_id="r")
    p = progress.progress_since_best(run)
    assert p.best_score == 0.8 and p.turns == 10 and p.tokens == 1000 and p.usd == Decimal("0.1")
    assert p.stuck(turns=10, usd=None) and not p.stuck(turns=11, usd=None)
    assert p.stuck(turns=None, usd=0.1) and not p.stuck(turns=None, usd=0.11)


def test_progress_of_a_run_without_a_score_counts_from_its_start(project):
    _ingest(project, "r", *[turn(n) for n in range(1, 4)])
    p = progress.progress_since_best(project.runs.get(external_id="r"))
    assert p.best_submission_id is None and p.turns == 3


def test_recent_calls_read_stored_turns_per_actor_in_turn_order(project):
    _ingest(
        project,
        "r",
        *[turn(n, calls=[{"name": "grep", "arguments": {"q": "x"}}]) for n in (3, 1, 2)],
        {"type": "agent.turn", "turn": 1, "actor": "child-1", "parent_actor": "driver", "tool_calls": ["ls"]},
    )
    calls = progress.recent_calls(project.runs.get(external_id="r"))
    assert [c.turn for c in calls["driver"]] == [1, 2, 3]
    assert [c.label for c in calls["child-1"]] == ["ls"]
