"""`manage.py import_events`: the three formats with lines modelled on the seeds (per-call usage logs,
agent.turn traces, contract events), gzip, format sniffing, bad lines skipped by reason with their line
numbers, ids that make re-imports and appended files exact, resume after Ctrl-C, --max-lines and
SIGKILL with the same rows as a clean import, memory that does not grow with the file, the command's
options, and the shell example of docs/integrations.md#jsonl-import."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Count, Max, Sum

from smrweb.sources import jsonl
from smrweb.tracking import events as ev
from smrweb.tracking import services
from smrweb.tracking.errors import EventError, InvalidEvents
from smrweb.tracking.models import (
    AgentTurn,
    Checkpoint,
    MetricPoint,
    Run,
    RuntimeMessage,
    StateChange,
    Submission,
)
from tests.conftest import ROOT, _database_url

DOCS = ROOT / "docs" / "integrations.md"


@pytest.fixture(autouse=True)
def data_dir(settings, tmp_path):
    """Checkpoints go under the test's own data directory."""
    settings.DATA_DIR = tmp_path / "data"
    return settings.DATA_DIR


def write(path: Path, lines: list) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def run_of(external_id: str) -> Run:
    return Run.objects.get(project__slug="hill", external_id=external_id)


def turns(external_id: str) -> list[AgentTurn]:
    return list(AgentTurn.objects.filter(run__external_id=external_id).order_by("actor", "turn"))


def balanced(stats: jsonl.ImportStats) -> bool:
    return stats.lines == stats.blank + stats.skipped + stats.accepted + stats.duplicates


# Seed 001: structured JSONL events of an LLM worker; `peer_backend_call` lines carry provider, model and
# input/output tokens; probes and warm-ups (agent_id null) carry none.
def call(
    agent: str | None, tokens_in: int, tokens_out: int, *, ts: str = "2026-04-14T10:00:01.120Z", **extra
) -> dict:
    return {
        "e": "peer_backend_call",
        "ts": ts,
        "request_id": "req-1",
        "agent_id": agent,
        "session_id": "s-7",
        "lane": "fast",
        "provider": "openai",
        "model": "gpt-4o-mini",
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        "http_status": 200,
        "error": None,
        "fix_hint": "",
        **extra,
    }


PROBE = {
    "e": "probe_started",
    "ts": "2026-04-14T09:59:58Z",
    "provider": "maxim_peer",
    "correlation_id": "c1",
    "agent_id": None,
}
FAILED = {
    "e": "peer_backend_call",
    "ts": "2026-04-14T10:00:09Z",
    "agent_id": "planner",
    "provider": "maxim_peer",
    "model": "qwen3-32b",
    "input_tokens": None,
    "output_tokens": None,
    "error": "PeerBusy",
    "fix_hint": "peer busy: retry later",
    "http_status": 503,
}


def usage_log(path: Path) -> Path:
    return write(
        path,
        [
            PROBE,  # 1 no usage
            call("planner", 1840, 212, latency_ms=812.4),  # 2 planner turn 0
            call(
                "coder",
                5120,
                933,
                parent_agent_id="planner",
                provider="anthropic",
                model="claude-sonnet-4",
                cost_usd=0.0294,
                ts="2026-04-14T10:00:03.500Z",
            ),  # 3 coder turn 0
            "",  # 4 blank
            FAILED,  # 5 no usage
            call("planner", 1840, 212, latency_ms=812.4),  # 6 identical to 2: a 2nd call
            '{"e": "peer_backend_call", "agent_id": "planner", "input_tokens": 12',  # 7 not JSON
            call("coder", -5, 10, parent_agent_id="planner"),  # 8 refused: tokens_in
            {
                "e": "llm_call",
                "ts": 1776160810.5,
                "agent": "coder",
                "parent_agent_id": "planner",
                "model": "anthropic/claude-haiku-4",
                "provider": "anthropic",
                "usage": {"prompt_tokens": 700, "completion_tokens": 90, "cost": 0.0011},
            },  # 9 coder turn 2 (8 was 1)
            call(None, 300, 20),  # 10 driver turn 0
            "[1, 2]",  # 11 not an object
        ],
    )


@pytest.mark.django_db
def test_usage_log_calls_become_turns_numbered_per_actor(project, tmp_path):
    result = jsonl.import_file(usage_log(tmp_path / "calls.jsonl"), project, "session-1")

    assert result.format == "usage-log" and result.complete and not result.interrupted
    s = result.stats
    assert (s.lines, s.blank, s.accepted, s.duplicates, s.skipped) == (11, 1, 6, 0, 4)
    assert balanced(s)
    assert s.reasons == {
        "no usage (not a model call)": [1, [1]],
        "not JSON": [1, [7]],
        "refused: tokens_in: Input should be greater than or equal to 0": [1, [8]],
        "not a JSON object": [1, [11]],
    }
    got = [
        (
            t.actor,
            t.turn,
            t.parent_actor,
            t.kind,
            t.model,
            t.tokens_in,
            t.tokens_out,
            t.cost_usd,
            t.duration_ms,
        )
        for t in turns("session-1")
    ]
    assert got == [
        (
            "coder",
            0,
            "planner",
            "child_work",
            "anthropic/claude-sonnet-4",
            5120,
            933,
            Decimal("0.029400"),
            None,
        ),
        # turn 1 of the coder is line 8, refused: numbers depend on the file alone, so it keeps its number
        ("coder", 2, "planner", "child_work", "anthropic/claude-haiku-4", 700, 90, Decimal("0.001100"), None),
        # No cost on the line: priced from the table (gpt-4o-mini: $0.15 / $0.60 per 1M).
        ("driver", 0, "", "driver_inference", "openai/gpt-4o-mini", 300, 20, Decimal("0.000057"), None),
        ("planner", 0, "", "driver_inference", "openai/gpt-4o-mini", 1840, 212, Decimal("0.000403"), 812),
        # Line 5, a failed call (seed 001's failure line): kept, with its error, status and hint.
        ("planner", 1, "", "driver_inference", "maxim_peer/qwen3-32b", 0, 0, Decimal(0), None),
        ("planner", 2, "", "driver_inference", "openai/gpt-4o-mini", 1840, 212, Decimal("0.000403"), 812),
    ]
    origins = [t.cost_origin for t in turns("session-1")]
    assert origins == ["reported", "reported", "computed", "computed", "reported", "computed"]
    failed = [
        (t.turn, t.failed, t.error, t.http_status, t.error_message) for t in turns("session-1") if t.failed
    ]
    assert failed == [(1, True, "PeerBusy", 503, "peer busy: retry later")]
    by_turn = {(t.actor, t.turn): t for t in turns("session-1")}
    assert by_turn["coder", 2].ts.isoformat() == "2026-04-14T10:00:10.500000+00:00"  # epoch seconds
    assert by_turn["planner", 0].ts.isoformat() == "2026-04-14T10:00:01.120000+00:00"
    ids = [t.event_id for t in turns("session-1")]
    assert all(re.fullmatch(rf"jsonl:{result.file_id}:\d+:[0-9a-f]{{16}}", i) for i in ids)
    assert (
        by_turn["planner", 0].event_id.split(":")[2] == "2"
        and by_turn["planner", 1].event_id.split(":")[2] == "5"
        and by_turn["planner", 2].event_id.split(":")[2] == "6"
    )
    run = run_of("session-1")
    assert (run.turn_count, run.tokens_in, run.tokens_out, run.failed_turns) == (6, 9800, 1467, 1)
    # 0.0294 + 0.0011 stated, 0.000057 + 2 × 0.000403 computed
    assert run.cost_usd == Decimal("0.031363") == run.driver_cost_usd + run.child_cost_usd


# Seed 003: Scope.meter emits an agent.turn trace event per driver turn: turn index, tool calls, the
# turn's spend {iterations, tokens {input, output}, usd, ms}; nested sub-drivers have a scope of their own.
def trace_turn(turn: int, scope: str = "root", **extra) -> dict:
    return {
        "type": "agent.turn",
        "turn": turn,
        "scope": scope,
        "toolCalls": ["list_questions", "spawn"],
        "spend": {
            "iterations": 0,
            "tokens": {"input": 1000 + turn, "output": 200 + turn},
            "usd": 0.013,
            "ms": 0,
        },
        "ts": 1781643304000 + turn * 1000,
        "runId": "r-54bbddea",
        **extra,
    }


@pytest.mark.django_db
def test_agent_turn_traces(project, tmp_path):
    path = write(
        tmp_path / "trace.jsonl",
        [
            {"type": "run.started", "runId": "r-54bbddea", "ts": 1781643303000},  # 1 not a turn
            trace_turn(0),  # 2
            trace_turn(1, toolCalls=[{"name": "bash", "args": {"cmd": "ls"}}]),  # 3
            trace_turn(
                0,
                scope="root/sub-1",
                parentScope="root",
                kind="childWork",
                spend={"tokens": {"input": 50, "output": 5}, "usd": 0.0004, "ms": 1520},
            ),  # 4
            {
                "event": "agent.turn",
                "turnIndex": 2,
                "actor": "root",
                "usage": {"inputTokens": 10, "outputTokens": 3},
                "costUsd": 0,
                "durationMs": 40.6,
            },  # 5
            trace_turn(3, spend={"tokens": {"input": 1.5, "output": 2}, "usd": 0.01}),  # 6 refused: tokens_in
            trace_turn(1),  # 7 same (actor, turn) as 3
            {"type": "agent.turn", "scope": "root", "spend": {"usd": 0.2}},  # 8 refused: no turn
        ],
    )
    result = jsonl.import_file(path, project, "trace-1")

    assert result.format == "agent-turns"
    s = result.stats
    assert (s.lines, s.accepted, s.duplicates, s.skipped) == (8, 4, 1, 3) and balanced(s)
    assert s.reasons == {
        "not an agent.turn event": [1, [1]],
        "refused: tokens_in: Input should be a valid integer": [1, [6]],
        "refused: turn: Field required": [1, [8]],
    }
    got = [
        (
            t.actor,
            t.turn,
            t.parent_actor,
            t.kind,
            t.tokens_in,
            t.tokens_out,
            t.cost_usd,
            t.tool_calls,
            t.duration_ms,
        )
        for t in turns("trace-1")
    ]
    assert got == [
        (
            "root",
            0,
            "",
            "driver_inference",
            1000,
            200,
            Decimal("0.013000"),
            ["list_questions", "spawn"],
            None,
        ),
        (
            "root",
            1,
            "",
            "driver_inference",
            1001,
            201,
            Decimal("0.013000"),
            [{"name": "bash", "args": {"cmd": "ls"}}],
            None,
        ),
        ("root", 2, "", "driver_inference", 10, 3, Decimal(0), [], 41),
        (
            "root/sub-1",
            0,
            "root",
            "child_work",
            50,
            5,
            Decimal("0.000400"),
            ["list_questions", "spawn"],
            1520,
        ),
    ]
    assert turns("trace-1")[0].ts.isoformat() == "2026-06-16T20:55:04+00:00"  # epoch milliseconds
    run = run_of("trace-1")
    assert run.cost_usd == Decimal("0.026400") and run.child_cost_usd == Decimal("0.000400")


@pytest.mark.django_db
def test_generic_contract_events(project, tmp_path):
    path = write(
        tmp_path / "events.jsonl",
        [
            {"type": "state", "state": "running", "ts": "2026-04-14T10:00:00Z"},  # 1
            {"type": "metric", "key": "loss", "value": 0.5, "step": 1},  # 2
            {"type": "metric", "key": "loss", "value": 0.5, "step": 1},  # 3 twice: 2 points
            {"type": "metric", "id": "loss-2", "key": "loss", "value": 0.4, "step": 2},  # 4 own id
            {"type": "agent.turn", "turn": 0, "tokens_in": 10, "tokens_out": 2, "cost_usd": 0.001},  # 5
            {"type": "score", "score": 0.83, "harness_id": "h1", "commit": "3fa2c1d"},  # 6
            {"type": "message", "body": "try a smaller step", "topic": "hint"},  # 7
            {"type": "checkpoint", "id": "ck-1", "label": "before refactor", "commit": "3fa2c1d"},  # 8
            {"type": "metric", "key": "loss", "value": 0.3, "step": 3, "extra": 1},  # 9 refused
            {"type": "bogus", "x": 1},  # 10 refused
            '{"type": "metric", "key": "loss", "value": NaN}',  # 11 not JSON
            {"type": "state", "state": "done", "ts": "2026-04-14T11:00:00Z"},  # 12
            {"type": "metric", "id": "loss-2", "key": "loss", "value": 0.4, "step": 2},  # 13 same id: dup
        ],
    )
    with path.open("ab") as out:
        out.write(b'{"type": "message", "body": "caf\xe9"}\n')  # 14 not UTF-8
    result = jsonl.import_file(path, project, "gen-1", fmt="generic")
    s = result.stats
    assert (s.lines, s.accepted, s.duplicates, s.skipped) == (14, 9, 1, 4) and balanced(s)
    assert s.reasons == {
        "refused: extra: Extra inputs are not permitted": [1, [9]],
        "refused: type: Unknown event type 'bogus'; expected one of: metric, score, agent.turn, state, "
        "message, "
        "checkpoint.": [1, [10]],
        "not JSON": [2, [11, 14]],
    }
    run = run_of("gen-1")
    assert MetricPoint.objects.filter(run=run).count() == 3
    assert MetricPoint.objects.filter(run=run, event_id="loss-2").exists()
    assert run.state == "done" and StateChange.objects.filter(run=run).count() == 2
    assert Submission.objects.get(run=run).score == 0.83
    assert RuntimeMessage.objects.filter(run=run).count() == 1
    assert Checkpoint.objects.filter(run=run, external_id="ck-1").exists()
    assert run.turn_count == 1


@pytest.mark.django_db
def test_reimport_is_all_duplicates_and_appended_lines_are_the_only_new_ones(project, tmp_path):
    path = usage_log(tmp_path / "calls.jsonl")
    first = jsonl.import_file(path, project, "s")
    again = jsonl.import_file(path, project, "s")
    assert (again.stats.accepted, again.stats.duplicates) == (0, first.stats.accepted)
    assert again.stats.reasons == first.stats.reasons and again.file_id == first.file_id

    # Renamed, appended to and compressed: still the same file; only the new calls are added.
    grown = tmp_path / "calls-renamed.jsonl.gz"
    with gzip.open(grown, "wb") as out:
        out.write(path.read_bytes())
        out.write((json.dumps(call("planner", 111, 11)) + "\n").encode())
        out.write(
            (json.dumps(call("planner", 1840, 212, latency_ms=812.4)) + "\n").encode()
        )  # like line 2 again
    third = jsonl.import_file(grown, project, "s")
    assert third.file_id == first.file_id
    assert (third.stats.accepted, third.stats.duplicates) == (2, 6)
    planner = [(t.turn, t.tokens_in) for t in turns("s") if t.actor == "planner"]
    assert planner == [(0, 1840), (1, 0), (2, 1840), (3, 111), (4, 1840)]  # 1: the failed call
    assert run_of("s").turn_count == 8


@pytest.mark.django_db
def test_gzip_reads_like_the_plain_file(project, tmp_path):
    plain = usage_log(tmp_path / "calls.jsonl")
    packed = tmp_path / "calls.log"  # gzip is told by its bytes, not its name
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    from_gz = jsonl.import_file(packed, project, "gz")
    from_plain = jsonl.import_file(plain, project, "plain")
    assert from_gz.stats == from_plain.stats and from_gz.file_id == from_plain.file_id
    assert [(t.actor, t.turn, t.event_id) for t in turns("gz")] == [
        (t.actor, t.turn, t.event_id) for t in turns("plain")
    ]


@pytest.mark.django_db
def test_format_is_told_from_the_first_lines(project, tmp_path):
    assert jsonl.sniff_format(usage_log(tmp_path / "u.jsonl")) == "usage-log"  # after a probe line
    assert (
        jsonl.sniff_format(write(tmp_path / "t.jsonl", [{"type": "run.started"}, trace_turn(0)]))
        == "agent-turns"
    )
    assert (
        jsonl.sniff_format(
            write(
                tmp_path / "g.jsonl",
                [{"type": "state", "state": "running"}, {"type": "metric", "key": "k", "value": 1}],
            )
        )
        == "generic"
    )
    # Contract agent.turn lines fit both: generic, unless a trace line follows.
    contract_turn = {"type": "agent.turn", "turn": 0, "tokens_in": 1}
    assert jsonl.sniff_format(write(tmp_path / "ct.jsonl", [contract_turn] * 3)) == "generic"
    assert jsonl.sniff_format(write(tmp_path / "ct2.jsonl", [contract_turn, trace_turn(1)])) == "agent-turns"
    gz = tmp_path / "g.gz"
    gz.write_bytes(gzip.compress((tmp_path / "u.jsonl").read_bytes()))
    assert jsonl.sniff_format(gz) == "usage-log"
    with pytest.raises(jsonl.ImportFailed, match="Cannot tell the format .* pass --format"):
        jsonl.sniff_format(write(tmp_path / "x.jsonl", ["hello", {"level": "info", "msg": "started"}]))


@pytest.mark.django_db
def test_refused_events_are_mapped_back_to_their_lines_across_batches(project, tmp_path):
    lines = []
    for i in range(1, 31):
        if i % 7 == 0:
            lines.append({"type": "metric", "key": "loss", "value": "high", "step": i})  # refused: value
        elif i % 11 == 0:
            lines.append({"type": "metric", "key": "", "value": 1.0, "step": i})  # refused: key
        else:
            lines.append({"type": "metric", "key": "loss", "value": i / 10, "step": i})
    result = jsonl.import_file(write(tmp_path / "m.jsonl", lines), project, "m", batch_size=4)
    assert result.stats.reasons == {
        "refused: value: Input should be a valid number": [4, [7, 14, 21, 28]],
        "refused: key: String should have at least 1 character": [2, [11, 22]],
    }
    assert result.stats.accepted == 24 and balanced(result.stats)
    assert sorted(MetricPoint.objects.filter(run=run_of("m")).values_list("step", flat=True)) == [
        i for i in range(1, 31) if i % 7 and i % 11
    ]


@pytest.mark.django_db
def test_a_batch_refused_as_a_whole_is_checked_line_by_line(project, tmp_path, monkeypatch):
    """The contract names the event of each error; should a batch ever be refused without an index,
    its lines are validated one at a time and only the bad ones skipped."""
    real = ev.parse_events

    def parse(body):
        events = json.loads(body)
        if len(events) > 1:
            raise InvalidEvents([EventError(None, "", "refused as a whole")])
        return real(body)

    monkeypatch.setattr(ev, "parse_events", parse)
    lines = [{"type": "metric", "key": "k", "value": float(i), "step": i} for i in range(6)]
    lines[2]["value"] = None
    result = jsonl.import_file(write(tmp_path / "m.jsonl", lines), project, "whole", batch_size=3)
    assert result.stats.reasons == {"refused: value: Input should be a valid number": [1, [3]]}
    assert sorted(MetricPoint.objects.filter(run=run_of("whole")).values_list("step", flat=True)) == [
        0,
        1,
        3,
        4,
        5,
    ]


@pytest.mark.django_db
def test_overlong_lines_are_skipped_without_being_held(project, tmp_path, monkeypatch):
    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 200)
    path = tmp_path / "long.jsonl"
    path.write_text(
        json.dumps({"type": "message", "body": "x" * 5000})
        + "\n"
        + json.dumps({"type": "metric", "key": "k", "value": 1.0})
        + "\n"
    )
    result = jsonl.import_file(path, project, "long", fmt="generic")
    assert result.stats.reasons == {"line too long (over 200 bytes)": [1, [1]]}
    assert result.stats.accepted == 1 and result.stats.lines == 2


def _fingerprint(external_id: str) -> list:
    """Everything an import decides about a run's turns and metrics."""
    run = run_of(external_id)
    rows = sorted(
        AgentTurn.objects.filter(run=run).values_list("event_id", "actor", "turn", "tokens_in", "cost_usd")
    )
    points = sorted(MetricPoint.objects.filter(run=run).values_list("event_id", "step", "value"))
    return [rows, points, run.turn_count, run.tokens_in, run.cost_usd]


def mixed_usage_lines(n: int) -> list:
    """A usage log of `n` lines: three actors' calls between probe lines, one call repeated verbatim."""
    out = []
    for i in range(n):
        if i % 8 == 0:
            out.append(
                call(
                    ("planner", "coder", "critic")[i // 8 % 3],
                    100 + i % 97,
                    10 + i % 13,
                    ts=f"2026-04-14T10:{i // 60 % 60:02d}:{i % 60:02d}Z",
                    cost_usd=(i % 5) / 1000,
                )
            )
        elif i % 32 == 1:
            out.append(call("coder", 7, 7, ts="2026-04-14T10:00:00Z"))  # the same call, many times
        else:
            out.append({**PROBE, "correlation_id": f"c{i}"})
    return out


def call_lines(lines: list) -> list[int]:
    """The line numbers of the calls."""
    return [number for number, line in enumerate(lines, 1) if "input_tokens" in line]


def turns_per_actor(lines: list) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in lines:
        if "input_tokens" in line:
            counts[line["agent_id"]] = counts.get(line["agent_id"], 0) + 1
    return counts


@pytest.mark.django_db
def test_ctrl_c_and_max_lines_resume_to_the_rows_of_a_clean_import(project, tmp_path, monkeypatch):
    lines = mixed_usage_lines(2000)
    path = write(tmp_path / "calls.jsonl", lines)
    calls_at = call_lines(lines)
    clean = jsonl.import_file(path, project, "clean", batch_size=50)
    assert clean.stats.accepted == len(calls_at) == 313

    # --max-lines: stop, then go on where it stopped.
    part = jsonl.import_file(path, project, "limited", batch_size=50, max_lines=700)
    assert part.stopped_at == 700 and not part.complete and part.state_path.exists()
    assert AgentTurn.objects.filter(run__external_id="limited").count() == len(
        [n for n in calls_at if n <= 700]
    )
    rest = jsonl.import_file(path, project, "limited", batch_size=50)
    assert rest.resumed_at == 700 and rest.complete and not rest.state_path.exists()
    assert rest.stats == clean.stats  # the summary covers the whole file
    assert _fingerprint("limited") == _fingerprint("clean")

    # Ctrl-C in the middle of a write: the batch is rolled back, the checkpoint is the one before it
    # (the first call of ingest_events checks the run id; then 4 batches of 50 calls are written).
    real, calls = services.ingest_events, []

    def ingest(project, run, events):
        calls.append(len(events))
        if len(calls) == 6:
            raise KeyboardInterrupt
        return real(project, run, events)

    monkeypatch.setattr(services, "ingest_events", ingest)
    stopped = jsonl.import_file(path, project, "ctrl-c", batch_size=50)
    assert stopped.interrupted and stopped.stopped_at == calls_at[4 * 50 - 1]
    assert AgentTurn.objects.filter(run__external_id="ctrl-c").count() == 200
    assert "run the same command again to resume" in jsonl.format_summary(stopped)
    monkeypatch.setattr(services, "ingest_events", real)
    resumed = jsonl.import_file(path, project, "ctrl-c", batch_size=50)
    assert resumed.resumed_at == calls_at[199] and resumed.stats == clean.stats
    assert _fingerprint("ctrl-c") == _fingerprint("clean")


@pytest.mark.django_db
def test_a_gzip_file_resumes_too(project, tmp_path):
    lines = mixed_usage_lines(3000)
    packed = tmp_path / "calls.jsonl.gz"
    packed.write_bytes(gzip.compress(write(tmp_path / "calls.jsonl", lines).read_bytes()))
    clean = jsonl.import_file(tmp_path / "calls.jsonl", project, "clean", batch_size=40)
    first = jsonl.import_file(packed, project, "gz", batch_size=40, max_lines=1234)
    assert first.stopped_at == 1234
    state = json.loads(first.state_path.read_text())
    assert state["line"] == 1234 and state["adapter"]["turns"] == turns_per_actor(lines[:1234])
    rest = jsonl.import_file(packed, project, "gz", batch_size=40)
    assert rest.resumed_at == 1234 and rest.stats == clean.stats
    assert _fingerprint("gz") == _fingerprint("clean")


@pytest.mark.django_db
def test_a_checkpoint_is_not_trusted_when_the_file_changed_before_it(project, tmp_path):
    lines = [{"type": "metric", "key": "loss", "value": 1.0, "step": i} for i in range(400)]
    path = write(tmp_path / "m.jsonl", lines)
    jsonl.import_file(path, project, "edited", batch_size=20, max_lines=200)
    lines[150] = {
        "type": "metric",
        "key": "loss",
        "value": 0.25,
        "step": 150,
    }  # rewritten before the checkpoint
    write(path, lines)
    result = jsonl.import_file(path, project, "edited", batch_size=20)
    assert result.resumed_at is None and "file changed" in result.restarted
    assert (result.stats.lines, result.stats.accepted, result.stats.duplicates) == (400, 201, 199)
    assert "started over" in jsonl.format_summary(result)
    jsonl.import_file(write(tmp_path / "fresh.jsonl", lines), project, "fresh")
    edited = set(MetricPoint.objects.filter(run__external_id="edited").values_list("event_id", "value"))
    fresh = set(MetricPoint.objects.filter(run__external_id="fresh").values_list("event_id", "value"))
    assert fresh < edited and len(edited - fresh) == 1  # the line as it was stays; the new one is added


# --- the command, in this process and as a subprocess --------------------------------------------------


@pytest.mark.django_db
def test_command_options_and_summary(project, tmp_path, capsys):
    path = usage_log(tmp_path / "calls.jsonl")
    call_command("import_events", str(path), "--project", "hill", "--run", "cmd-1", "--quiet")
    out, err = capsys.readouterr()
    assert err == ""  # --quiet: no progress bar
    assert "calls.jsonl → hill/cmd-1 (format usage-log" in out
    assert "events: 6 accepted, 0 duplicates" in out and "skipped: 4 lines:" in out
    assert "  no usage (not a model call): 1 (line 1)" in out and "  not JSON: 1 (line 7)" in out

    call_command("import_events", str(path), "--project", "hill", "--run", "cmd-1")
    out, err = capsys.readouterr()
    assert "events: 0 accepted, 6 duplicates" in out
    assert "calls.jsonl" in err and "100%" in err  # the progress bar, in bytes, on stderr

    # --format: read as contract events, no line of a usage log is one.
    call_command(
        "import_events", str(path), "--project", "hill", "--run", "cmd-2", "--format", "generic", "--quiet"
    )
    out, _ = capsys.readouterr()
    assert "events: 0 accepted" in out and "refused: type: Missing event type" in out
    assert not Run.objects.filter(external_id="cmd-2").exists()

    # --run: the turns land in the run named, created on its first event.
    assert run_of("cmd-1").turn_count == 6

    with pytest.raises(CommandError, match="No project 'nope'"):
        call_command("import_events", str(path), "--project", "nope", "--run", "x")
    with pytest.raises(CommandError, match="A run id is 1 to 200"):
        call_command("import_events", str(path), "--project", "hill", "--run", "a/b", "--quiet")
    with pytest.raises(CommandError, match="Cannot read"):
        call_command("import_events", str(tmp_path / "missing.jsonl"), "--project", "hill", "--run", "x")
    with pytest.raises(CommandError, match="batch size"):
        call_command("import_events", str(path), "--project", "hill", "--run", "x", "--batch-size", "6000")
    with pytest.raises(CommandError, match="invalid choice"):
        call_command("import_events", str(path), "--project", "hill", "--run", "x", "--format", "csv")


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "SMRWEB_DATA_DIR": str(tmp_path / "data"),
        "DJANGO_SETTINGS_MODULE": "smrweb.settings",
    }


@pytest.mark.django_db(transaction=True)
def test_sigkill_mid_file_then_resume_ends_with_the_rows_of_a_clean_import(project, tmp_path):
    n = 200_000
    lines = mixed_usage_lines(n)
    path = write(tmp_path / "calls.jsonl", lines)
    argv = [
        sys.executable,
        "manage.py",
        "import_events",
        str(path),
        "--project",
        "hill",
        "--batch-size",
        "1000",
        "--quiet",
    ]
    env = _env(tmp_path)
    proc = subprocess.Popen(
        [*argv, "--run", "killed"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    imports = tmp_path / "data" / "imports"
    deadline = time.monotonic() + 120
    line = 0
    while time.monotonic() < deadline and proc.poll() is None:
        for state in imports.glob("*.json"):
            try:
                line = json.loads(state.read_text())["line"]
            except (ValueError, OSError):
                pass
        if line >= 40_000:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.02)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, proc.stdout.read().decode()[-2000:]
    written = AgentTurn.objects.filter(run__external_id="killed").count()
    assert 0 < written < len(call_lines(lines)) // 2

    resumed = subprocess.run(
        [*argv, "--run", "killed"],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert re.search(r"resumed after line [\d,]+", resumed.stdout)
    assert not list(imports.glob("*.json"))  # finished: no checkpoint left
    clean = subprocess.run(
        [*argv, "--run", "clean"], check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert clean.returncode == 0, clean.stderr
    assert _fingerprint("killed") == _fingerprint("clean")
    assert AgentTurn.objects.filter(run__external_id="clean").count() == len(call_lines(lines))
    last_turns = dict(
        AgentTurn.objects.filter(run__external_id="killed")
        .values("actor")
        .annotate(last=Max("turn"))
        .values_list("actor", "last")
    )
    assert last_turns == {actor: count - 1 for actor, count in turns_per_actor(lines).items()}
    summary = re.search(r"lines read: ([\d,]+)", resumed.stdout).group(1)
    assert summary == f"{n:,}"


# Peak RSS of one import process: the SQLite page cache (64 MB) and memory map (256 MB) the settings give
# every connection are bounded but grow with the database while they fill, so the child turns them down
# to measure the importer itself; on PostgreSQL the database's memory is in another process anyway.
MEASURED_IMPORT = """
import os, sys, django
django.setup()
from django.core.management import call_command
from django.db import connection
if connection.vendor == "sqlite":
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA mmap_size=0")
        cursor.execute("PRAGMA cache_size=-2000")
call_command("import_events", *sys.argv[1:])
"""


# Linux carries a process's peak RSS over fork and exec, so a child forked from this (large) pytest process
# would report at least pytest's size. A small launcher forks the import and reports its children's peak.
LAUNCHER = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:])
print("peak-rss-kib", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(done.returncode)
"""


def _peak_rss_kib(argv: list[str], env: dict) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-c", LAUNCHER, *argv],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return int(re.search(r"peak-rss-kib (\d+)", done.stdout).group(1)), done.stdout


@pytest.mark.django_db(transaction=True)
def test_memory_does_not_grow_with_the_file(project, tmp_path):
    """A million-line file imports in the memory of a hundred-thousand-line one."""

    def generate(path: Path, n: int) -> Path:
        with path.open("w") as out:
            for i in range(n):
                out.write(f'{{"type": "metric", "key": "loss", "value": {1.0 / (i + 1)!r}, "step": {i}}}\n')
        return path

    env = _env(tmp_path)
    peaks = {}
    for n in (100_000, 1_000_000):
        path = generate(tmp_path / f"m{n}.jsonl", n)
        peaks[n], out = _peak_rss_kib(
            [
                sys.executable,
                "-c",
                MEASURED_IMPORT,
                str(path),
                "--project",
                "hill",
                "--run",
                f"m{n}",
                "--quiet",
            ],
            env,
        )
        assert f"events: {n:,} accepted" in out
        assert MetricPoint.objects.filter(run__external_id=f"m{n}").count() == n
        path.unlink()
    print(f"peak RSS: 100k lines {peaks[100_000]} KiB, 1M lines {peaks[1_000_000]} KiB")
    assert peaks[1_000_000] < 1.5 * peaks[100_000]
    assert peaks[1_000_000] < 200 * 1024


@pytest.mark.django_db(transaction=True)
def test_docs_example(project, tmp_path):
    """The shell example of docs/integrations.md#jsonl-import, run as written."""
    found = re.search(r"<!-- test: jsonl-example -->\s*\n```bash\n(.*?)\n```", DOCS.read_text(), re.DOTALL)
    assert found, "no code block marked jsonl-example in docs/integrations.md"
    work = tmp_path / "work"
    work.mkdir()
    (work / "manage.py").symlink_to(ROOT / "manage.py")
    env = {**_env(tmp_path), "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", found.group(1)],
        check=False,
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    printed = re.search(r"<!-- output: jsonl-example -->\s*\n```\n(.*?)\n```", DOCS.read_text(), re.DOTALL)
    assert printed and done.stdout.startswith(printed.group(1) + "\n")  # the doc shows the real summary
    assert "events: 2 accepted, 0 duplicates" in done.stdout
    assert "events: 0 accepted, 2 duplicates" in done.stdout
    assert "events: 1 accepted, 2 duplicates" in done.stdout
    assert "no usage (not a model call): 1 (line 1)" in done.stdout
    run = run_of("session-42")
    assert run.turn_count == 3 and run.tokens_in == 1840 + 5120 + 2210
    assert sorted(AgentTurn.objects.filter(run=run).values_list("actor", "turn")) == [
        ("coder", 0),
        ("planner", 0),
        ("planner", 1),
    ]
    # The coder's line states its cost; the planner's two gpt-4o-mini calls are priced from the table.
    # (1,840 × 0.15 + 212 × 0.60 and 2,210 × 0.15 + 187 × 0.60 micro-dollars)
    assert run.cost_usd == Decimal("0.029400") + Decimal("0.000403") + Decimal("0.000444")
    assert run.unpriced_turns == 0
    assert dict(
        AgentTurn.objects.filter(run=run)
        .values_list("kind")
        .annotate(Count("id"))
        .values_list("kind", "id__count")
    ) == {"driver_inference": 2, "child_work": 1}
    assert AgentTurn.objects.filter(run=run).aggregate(s=Sum("tokens_out"))["s"] == 212 + 933 + 187


def test_prompt_and_response_of_harness_lines_become_turn_bodies(tmp_path, project, alice):
    from smrweb.tracking.models import TurnBody

    services.update_project(project, by=alice, capture_turn_bodies=True)
    lines = [
        {
            "event": "agent.turn",
            "turnIndex": 1,
            "actor": "root",
            "usage": {"inputTokens": 10, "outputTokens": 3},
            "messages": [
                {"role": "user", "content": "Fix the loss."},
                "a bare string",
                {"content": "no role"},
            ],
            "completion": "Done \u0000 now.",
        },
        {"event": "agent.turn", "turnIndex": 2, "actor": "root", "prompt": 7, "response": {"text": "dict"}},
        {"provider": "openai", "model": "gpt-4o", "input_tokens": 5, "output_tokens": 1, "prompt": "[1, 2]"},
    ]
    agent = jsonl.import_file(write(tmp_path / "trace.jsonl", lines[:2]), project, "bodies-1")
    usage = jsonl.import_file(write(tmp_path / "calls.jsonl", lines[2:]), project, "bodies-2")
    # A body in a harness's own shape is read as well as it can be, never a reason to skip its turn.
    assert (agent.stats.accepted, agent.stats.skipped, usage.stats.accepted) == (2, 0, 1)
    bodies = {(b.turn.run.external_id, b.turn.turn): (b.prompt, b.response) for b in TurnBody.objects.all()}
    assert bodies == {
        ("bodies-1", 1): (
            "[user]\nFix the loss.\n\n[user]\na bare string\n\n[user]\nno role",
            "Done \ufffd now.",
        ),
        ("bodies-1", 2): ("[user]\n7", '[assistant]\ntext: "dict"'),
        ("bodies-2", 0): ("[1, 2]", ""),  # text stays text: not read as JSON
    }
