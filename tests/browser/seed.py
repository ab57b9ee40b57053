"""A realistic dataset for screenshots and layout checks, written through the services only.

Three projects (maximize and minimize scenarios), twelve runs in every interesting condition
(running with a budget, done, failed with a long reason, stalled, downgraded, queued, blocked,
canceled), ~50 scores, a few hundred agent turns split driver/child, artifacts, checkpoints
(one failed with its reason) and runtime messages. Time is moved with time-machine while
ingesting, so "last activity", "started" and stall detection look like a real afternoon.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

import time_machine
from django.utils import timezone

from smrweb.tracking import services
from smrweb.tracking.models import Project, Role, Run, Submission
from smrweb.tracking.services import submissions as lifecycle
from tests.browser.conftest import push, store
from tests.factories import admin_project

PRICE = {"gpt-5.4-medium": (1.25, 10.0), "gpt-5.4-mini": (0.25, 2.0)}
TOOLS = ["read_file", "apply_patch", "run_harness", "git_commit", "list_dir", "grep"]
LONG_RUN_ID = "run-2026-04-17T09-12-33-56f76ec3-a1b2-4c3d-9e8f-0123456789ab"
FAILURE_DETAIL = (
    "SmrPlanTasksIntent rejected: repo_like_task_count_mismatch requested=2 persisted=1 "
    "(semantic_task_dedupe collapsed tasks sharing task_affinity_key='prop-amm-optimization'); "
    "error_code=runtime_intent_nonretryable_failure; orchestrator gave up after 3 attempts"
)


@dataclass
class RunSpec:
    run_id: str
    fate: str  # running | done | failed | stalled | queued | blocked | canceled
    started_min_ago: float
    last_min_ago: float
    driver_turns: int
    scores: list[float]
    workers: int = 2
    budget_usd: str | None = None
    downgraded: bool = False
    artifacts: int = 0
    checkpoints: int = 0
    messages: list[str] = field(default_factory=list)


@dataclass
class Seeded:
    projects: dict[str, Project]
    runs: dict[str, Run]


def _ts(minutes_ago: float, now: datetime) -> datetime:
    return now - timedelta(minutes=minutes_ago)


def _turn(rng: random.Random, n: int, actor: str, parent: str | None, ts: datetime) -> dict:
    model = "gpt-5.4-medium" if parent is None else "gpt-5.4-mini"
    tin, tout = rng.randint(2_000, 16_000), rng.randint(150, 2_400)
    pin, pout = PRICE[model]
    event = {
        "type": "agent.turn",
        "turn": n,
        "actor": actor,
        "model": model,
        "tokens_in": tin,
        "tokens_out": tout,
        "cost_usd": round(tin * pin / 1e6 + tout * pout / 1e6, 6),
        "tool_calls": rng.sample(TOOLS, rng.randint(0, 3)),
        "duration_ms": rng.randint(800, 20_000),
        "ts": ts.isoformat(),
    }
    if parent:
        event["parent_actor"] = parent
    return event


def _seed_run(project: Project, spec: RunSpec, scenario_path: str, now: datetime, rng: random.Random) -> Run:
    start, end = spec.started_min_ago, spec.last_min_ago
    with time_machine.travel(_ts(start, now), tick=False):
        services.update_run_settings(
            project,
            spec.run_id,
            requested_profile="codex_gpt_5_4_medium",
            actual_profile="codex_gpt_5_4_mini_medium" if spec.downgraded else "codex_gpt_5_4_medium",
            git_branch=f"agent/{spec.run_id[:24]}",
            git_commit=hashlib.sha1(spec.run_id.encode()).hexdigest(),
            **({"budget_usd": Decimal(spec.budget_usd)} if spec.budget_usd else {}),
        )
        kickoff = [{"type": "state", "state": "queued", "ts": _ts(start, now).isoformat()}]
        if spec.fate != "queued":
            kickoff.append({"type": "state", "state": "running", "ts": _ts(start - 0.2, now).isoformat()})
        kickoff.append(
            {
                "type": "message",
                "topic": "smr.trigger.initial_runtime_message",
                "target": "role:orchestrator",
                "mode": "queue",
                "ts": _ts(start, now).isoformat(),
                "body": "Hill-climb the benchmark. Carry forward: avoid the last 3 failed approaches "
                "(bigger MLP without normalisation, lr > 3e-3, self-play without a frozen opponent).",
            }
        )
        push(project, spec.run_id, *kickoff)

    # Spread the work (turns, scores, artifacts, checkpoints) over [start, end] in ~12 batches.
    steps = max(1, spec.driver_turns)
    batches = min(12, steps)
    child_n: dict[str, int] = {}
    score_at = {round((i + 1) * steps / (len(spec.scores) + 1)): s for i, s in enumerate(spec.scores)}
    ckpt_at = {round((i + 1) * steps / (spec.checkpoints + 1)) for i in range(spec.checkpoints)}
    art_left = spec.artifacts
    msg_at = {round((i + 1) * steps / (len(spec.messages) + 1)): m for i, m in enumerate(spec.messages)}
    events: list[dict] = []
    ckpt_i = 0
    for n in range(spec.driver_turns):
        minutes = start - (start - end) * (n + 1) / steps
        ts = _ts(minutes, now)
        events.append(_turn(rng, n, "driver", None, ts))
        for w in range(rng.randint(0, spec.workers)):
            actor = f"worker-{w + 1}"
            events.append(_turn(rng, child_n.setdefault(actor, 0), actor, "driver", ts))
            child_n[actor] += 1
        events.append(
            {
                "type": "metric",
                "key": "train/loss",
                "step": n,
                "value": round(2.5 * math.exp(-n / 40) + rng.random() * 0.05, 5),
                "ts": ts.isoformat(),
            }
        )
        if n in score_at:
            value = score_at[n]
            ref = None
            if art_left > 0:
                content = (
                    f"# {project.slug} {spec.run_id} turn {n}\nLR = {rng.uniform(1e-4, 3e-3):.5f}\n".encode()
                    * 40
                )
                with time_machine.travel(ts, tick=False):
                    artifact = store(project, spec.run_id, scenario_path, content, kind="file")
                ref = artifact.blob.sha256
                art_left -= 1
            events.append(
                {
                    "type": "score",
                    "score": value,
                    "harness_id": project.scenario.harness_id or "bench-v1",
                    "artifact": ref,
                    "commit": f"{n:07x}",
                    "details": {"turn": n},
                    "ts": ts.isoformat(),
                }
            )
        if n in ckpt_at:
            ckpt_i += 1
            failed = ckpt_i == 2 and spec.fate == "running"  # the second checkpoint of a live run failed
            events.append(
                {
                    "type": "checkpoint",
                    "id": f"ckpt-{n}",
                    "label": f"after turn {n}",
                    "commit": hashlib.sha1(f"{spec.run_id}{n}".encode()).hexdigest()[:12],
                    "restorable": not failed,
                    "failure_reason": (
                        "Runtime checkpoint failed (before_actor:orchestrator): workspace snapshot "
                        "timed out after 120s"
                    )
                    if failed
                    else "",
                    "ts": ts.isoformat(),
                }
            )
        if n in msg_at:
            events.append(
                {
                    "type": "message",
                    "topic": "operator.steer",
                    "target": "role:orchestrator",
                    "mode": "queue",
                    "body": msg_at[n],
                    "ts": ts.isoformat(),
                }
            )
        if (n + 1) % max(1, steps // batches) == 0 or n == steps - 1:
            with time_machine.travel(ts, tick=False):
                push(project, spec.run_id, *events)
            events = []

    end_ts = _ts(end, now)
    final = {
        "done": [{"type": "state", "state": "done", "ts": end_ts.isoformat()}],
        "canceled": [{"type": "state", "state": "canceled", "ts": end_ts.isoformat()}],
        "blocked": [{"type": "state", "state": "blocked", "ts": end_ts.isoformat()}],
        "failed": [
            {
                "type": "state",
                "state": "failed",
                "ts": end_ts.isoformat(),
                "failure": {
                    "family": "runtime_intent",
                    "source": "state_machine_runtime",
                    "detail": FAILURE_DETAIL,
                },
            }
        ],
    }.get(spec.fate)
    if final:
        with time_machine.travel(end_ts, tick=False):
            push(project, spec.run_id, *final)
    return Run.objects.get(project=project, external_id=spec.run_id)


def seed(alice, bob=None, *, seed_value: int = 7) -> Seeded:
    rng = random.Random(seed_value)
    now = timezone.now()
    dogfight_scn = services.create_scenario(
        key="onnx-arena",
        name="Dogfight ONNX arena",
        harness_id="dogfight-elo-v1",
        artifact_path="submission/policy.onnx",
        artifact_kind="onnx_model",
        score_metric="elo",
        direction="maximize",
        score_min=0,
        score_max=4000,
        arena_name="Dogfight",
        arena_url="https://optimizationarena.com/dogfight",
    )
    optimizer_scn = services.create_scenario(
        key="optimizer-hillclimb",
        name="Optimizer hill-climb",
        harness_id="optimizer-bench-v2",
        artifact_path="submission/optimizer.py",
        artifact_kind="python_source",
        score_metric="val_loss",
        direction="minimize",
        score_min=0,
    )
    amm_scn = services.create_scenario(
        key="prop-amm",
        name="Prop AMM challenge",
        harness_id="prop-amm-sim",
        artifact_path="src/strategy.rs",
        score_metric="edge_bps",
        direction="maximize",
    )

    projects = {
        "dogfight": admin_project("dogfight", name="Dogfight arena", scenario=dogfight_scn, by=alice),
        "optimizer": admin_project(
            "optimizer", name="Optimizer hill-climb", scenario=optimizer_scn, by=alice
        ),
        "prop-amm": admin_project("prop-amm", name="Prop AMM market-making", scenario=amm_scn, by=alice),
    }
    if bob is not None:
        services.add_member(projects["dogfight"], bob, role=Role.REVIEWER)

    elo = [1012, 1034, 1029, 1061, 1088, 1079, 1112, 1140, 1133, 1167, 1189, 1176, 1214, 1238]
    plan = {
        "dogfight": [
            RunSpec(
                "run-7f3a2c",
                "running",
                185,
                0.3,
                150,
                elo,
                budget_usd="25.00",
                artifacts=14,
                checkpoints=4,
                messages=[
                    "Focus on the value head; the policy head is saturated.",
                    "Stop tuning the learning rate, try a frozen-opponent curriculum instead.",
                    "Keep the parameter count under 250K — the validator rejects bigger models.",
                ],
            ),
            RunSpec(
                "run-5b91e0",
                "done",
                420,
                300,
                40,
                [998, 1021, 1050, 1047, 1093, 1102, 1099, 1121],
                budget_usd="10.00",
                artifacts=2,
                checkpoints=2,
            ),
            RunSpec("run-c04d17", "failed", 260, 232, 18, [1003, 990, 1017], artifacts=1, checkpoints=1),
            RunSpec(
                LONG_RUN_ID,
                "stalled",
                140,
                48,
                22,
                [1008, 1031],
                downgraded=True,
                budget_usd="15.00",
                checkpoints=1,
            ),
            RunSpec("run-e8a1f2", "queued", 2, 2, 0, []),
        ],
        "optimizer": [
            RunSpec(
                "opt-0412",
                "running",
                95,
                1.5,
                30,
                [3.91, 3.84, 3.86, 3.71, 3.66, 3.62],
                downgraded=True,
                budget_usd="8.00",
                artifacts=3,
                checkpoints=2,
            ),
            RunSpec("opt-0409", "done", 1500, 1380, 25, [3.95, 3.88, 3.79, 3.80, 3.74], artifacts=2),
            RunSpec("opt-0407", "canceled", 2900, 2870, 6, []),
            RunSpec("opt-0405", "done", 4300, 4200, 12, [4.02, 3.97, 3.93], artifacts=1),
        ],
        "prop-amm": [
            RunSpec("amm-31", "blocked", 70, 6, 10, [12.4, 15.1], budget_usd="5.00"),
            RunSpec("amm-30", "running", 50, 4, 14, [11.2, 13.9, 14.6], artifacts=1),
            RunSpec("amm-29", "done", 1900, 1800, 9, [9.8, 10.7]),
        ],
    }
    runs = {}
    for slug, specs in plan.items():
        project = projects[slug]
        path = project.scenario.artifact_path or "submission.bin"
        for spec in specs:
            runs[spec.run_id] = _seed_run(project, spec, path, now, rng)
    services.flag_stalled_runs()
    _verify_most(alice)
    for run in runs.values():
        run.refresh_from_db()
    return Seeded(projects=projects, runs=runs)


def _verify_most(by) -> None:
    """Through the real lifecycle: every score but each run's latest passed verification (the project's
    numbers count verified work), and one in seven failed it, as a validator would refuse some."""
    latest = {
        run_id: pk for run_id, pk in Submission.objects.order_by("ts", "id").values_list("run_id", "pk")
    }
    for i, sub in enumerate(Submission.objects.exclude(pk__in=latest.values()).order_by("id")):
        record_verdict(sub, by, passed=i % 7 != 3, failure="over the limit")


P0A_RUN_ID = "ux-regress-1"


def seed_p0a(project: Project, by) -> Run:
    """The walkthrough's P0-A run (issue 33) in a minimize project: 3.30 whose artifact failed validation
    (invalid), 3.45 (verified), 3.80 (a candidate, a regression), a turn before each — the run page then
    draws 3.30 hollow and its best-so-far line at 3.45."""
    now = timezone.now()
    events = []
    for i, value in enumerate((3.30, 3.45, 3.80)):
        at = now - timedelta(minutes=9 - 3 * i)
        events.append(
            {
                "type": "agent.turn",
                "turn": i + 1,
                "actor": "driver",
                "model": "gpt-5.4-medium",
                "tokens_in": 8000,
                "tokens_out": 700,
                "cost_usd": 0.02,
                "ts": (at - timedelta(seconds=40)).isoformat(),
            }
        )
        events.append({"type": "score", "score": value, "id": f"p0a-{i}", "ts": at.isoformat()})
    push(
        project,
        P0A_RUN_ID,
        {"type": "state", "state": "running", "ts": (now - timedelta(minutes=10)).isoformat()},
        *events,
    )
    subs = list(Submission.objects.filter(run__project=project, run__external_id=P0A_RUN_ID).order_by("ts"))
    for sub, passed in zip(subs[:2], (False, True), strict=True):
        record_verdict(sub, by, passed=passed)
    return Run.objects.get(project=project, external_id=P0A_RUN_ID)


def record_verdict(sub: Submission, by, *, passed: bool, failure: str = "optimizer.py has no step()") -> None:
    """What the validator's verdict does to a submission, recorded as the worker records it: verified, or
    invalid with `failure` as its FAIL line (by default the walkthrough's 3.30: an optimizer without
    `step()`)."""
    lifecycle.request_verification(sub, by=by)
    lifecycle.record_verification(
        sub.pk,
        lifecycle.VerificationResult(
            "passed" if passed else "failed",
            0 if passed else 1,
            "PASS" if passed else f"FAIL  {failure}",
            f"exited {0 if passed else 1}",
        ),
    )
