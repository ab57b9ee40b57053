"""The simulator's in-memory world: projects, runs and everything a run emits, advanced tick by tick.

Nothing here knows about HTTP or Django. Every value is a function of the seed, the start time and
the number of ticks applied (plus whatever clients did through `stop` / `restore`), so two worlds
built with the same arguments and advanced the same way are equal field for field.

Money is kept in integer pico-USD (1 USD = 10**12 pico-USD, 1 cent = 10**10). Cents are derived
with `pico_to_cents` (round half up) wherever the wire wants cents; sums are always taken in pico.

The wire shapes (`*_wire` methods) follow the SMR OpenAPI spec shipped in the `managed-research`
wheel; docs/simulator.md says which loose fields carry what.
"""

from __future__ import annotations

import base64
import hashlib
import math
import random
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

PICO_PER_USD = 10**12
PICO_PER_CENT = 10**10

ORG_ID = "org_simulated"
DEFAULT_PROJECT_ID = "sim-project"

# Profiles and the model each resolves to.
ORCH_PROFILE = "codex_gpt_5_4_medium"
ORCH_DOWNGRADED_PROFILE = "codex_gpt_5_4_mini_medium"
WORKER_PROFILE = "codex_gpt_5_4_mini_low"
WORKER_DOWNGRADED_PROFILE = "codex_gpt_5_4_nano_low"
PROFILE_MODEL = {
    ORCH_PROFILE: "gpt-5.4",
    ORCH_DOWNGRADED_PROFILE: "gpt-5.4-mini",
    WORKER_PROFILE: "gpt-5.4-mini",
    WORKER_DOWNGRADED_PROFILE: "gpt-5.4-nano",
}
# (input, output) price in pico-USD per token.
MODEL_PRICE = {
    "gpt-5.4": (1_250_000, 10_000_000),
    "gpt-5.4-mini": (250_000, 2_000_000),
    "gpt-5.4-nano": (50_000, 400_000),
}
SANDBOX_PICO_PER_SECOND = 50_000_000  # $0.18 per sandbox hour

METRIC = "val_loss"
METRIC_DIRECTION = "lower_is_better"
DEFAULT_METRICS = ((METRIC, METRIC_DIRECTION),)
METRIC_DIRECTIONS = ("lower_is_better", "higher_is_better")
COHORT_KEY = "toy-optimizer/val_loss/v1"
SUBMISSION_PATH = "submission/optimizer.py"
SUBMISSION_CONTENT_TYPE = "text/x-python"
KICKOFF_TOPIC = "smr.trigger.initial_runtime_message"
FAILURE = {
    "family": "runtime",
    "detail": "repo_like_task_count_mismatch:requested=2:persisted=3",
    "reason": "task_reconciliation_failed",
    "source": "orchestrator",
}
BUDGET_USD = 5.0

# Fates by run index within a project; indexes past the list hill-climb normally.
FATES = ("climb", "fail", "wedge", "downgrade")

# Wire shapes of the free-form parts (usage entries/totals/tokens/breakdown, cost-summary meters and
# pico amounts, per-actor roles and token keys). "a" is the historical shape; "b" is what another
# deployment could send just as validly. docs/simulator.md ("Shapes") lists every spelling.
SHAPES = ("a", "b")
B_METER = {"inference": "inference_tokens", "sandbox_seconds": "sandbox_time"}
B_UNIT = {"tokens": "token", "seconds": "second"}
B_ENTRY_ROLE = {"orchestrator": "lead", "worker": "subagent"}
B_PARTICIPANT_ROLE = {"orchestrator": "driver", "worker": "subagent"}
B_PROVIDER = {"inference": "openai", "sandbox_seconds": "docker"}
PROGRESS_TOPIC = "smr.orchestrator.progress"

ORCH_TOOLS = ("spawn_worker", "read_file", "shell", "record_experiment_result", "apply_patch")
WORKER_TOOLS = ("shell", "read_file", "apply_patch", "run_tests", "python")


def pico_to_cents(pico: int) -> int:
    """Cents the way the simulator reports them: round half up (pico amounts are never negative)."""
    return (pico + PICO_PER_CENT // 2) // PICO_PER_CENT


def pico_to_usd(pico: int) -> float:
    return pico / PICO_PER_USD


def pico_to_usd_text(pico: int) -> str:
    """Exact USD as a decimal string with 12 places: 1234567 pico -> "0.000001234567"."""
    return f"{pico // PICO_PER_USD}.{pico % PICO_PER_USD:012d}"


def parse_shapes(shapes: list[str] | tuple[str, ...] | str) -> tuple[str, ...]:
    """("a", "b") from a sequence or "a,b"; unknown names raise ValueError."""
    if isinstance(shapes, str):
        shapes = [s for s in shapes.split(",")]
    names = tuple(dict.fromkeys(s.strip() for s in shapes if s and s.strip()))
    if not names:
        raise ValueError("shapes must name at least one shape")
    unknown = [s for s in names if s not in SHAPES]
    if unknown:
        raise ValueError(f"unknown shape(s) {unknown}; known: {', '.join(SHAPES)}")
    return names


def parse_metrics(metrics) -> tuple[tuple[str, str], ...]:
    """((name, direction), ...) from pairs or "name:direction" strings; direction defaults to lower."""
    out = []
    for item in metrics:
        if isinstance(item, str):
            name, _, direction = item.partition(":")
        else:
            name, direction = item
        name, direction = str(name).strip(), (str(direction).strip() or METRIC_DIRECTION)
        if not name:
            raise ValueError("a metric needs a name")
        if direction not in METRIC_DIRECTIONS:
            raise ValueError(f"metric {name}: direction must be one of {', '.join(METRIC_DIRECTIONS)}")
        out.append((name, direction))
    if not out:
        raise ValueError("metrics must hold at least one (name, direction)")
    return tuple(out)


def iso(ts: datetime) -> str:
    """UTC, microseconds always present, `Z` suffix: string order equals time order."""
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_iso(text: str) -> datetime:
    text = text.strip()
    if len(text) > 6 and text[-6] == " " and text[-3] == ":":  # "+00:00" whose "+" a query string ate
        text = text[:-6] + "+" + text[-5:]
    value = datetime.fromisoformat(text)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _digest(*parts: object) -> str:
    return hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()


def _uuid(*parts: object) -> str:
    return str(uuid.UUID(bytes=bytes.fromhex(_digest(*parts)[:32]), version=4))


class NotFound(Exception):
    pass


class Conflict(Exception):
    def __init__(self, detail: dict[str, Any]):
        super().__init__(detail.get("message", "conflict"))
        self.detail = detail


@dataclass
class Actor:
    actor_id: str
    role: str  # "orchestrator" | "worker"
    parent_actor_id: str | None
    profile_id: str  # the resolved profile: what the actor really runs on
    requested_profile_id: str = ""  # what was asked for ("" = same as profile_id)
    turns: int = 0
    dispatched: bool = False
    # running sums over this actor's entries (so wire answers never rescan the entries)
    pico: int = 0
    events: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    pico_by_kind: dict[str, int] = field(default_factory=dict)
    pico_by_model: dict[str, int] = field(default_factory=dict)
    latest_at: str | None = None

    def __post_init__(self) -> None:
        if not self.requested_profile_id:
            self.requested_profile_id = self.profile_id

    @property
    def model(self) -> str:
        return PROFILE_MODEL[self.profile_id]

    @property
    def requested_model(self) -> str:
        return PROFILE_MODEL[self.requested_profile_id]

    @property
    def downgraded(self) -> bool:
        return self.requested_profile_id != self.profile_id


@dataclass
class SimRun:
    project_id: str
    index: int
    run_id: str
    fate: str
    rng: random.Random
    created_tick: int
    queue_ticks: int
    run_ticks: int  # running ticks until done (climb/downgrade), fail (fail) or wedge (wedge)
    baseline: float
    floor: float
    requested_profile: str
    resolved_profile: str
    actors: list[Actor]
    state: str = "pending"  # not created yet
    live_phase: str = "queued"
    terminal_outcome: str | None = None
    state_reason: str | None = None
    stop_reason: str | None = None
    stop_reason_message: str | None = None
    failure: dict[str, str] | None = None
    wedged: bool = False
    wedged_at: datetime | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    updated_at: datetime | None = None
    running_ticks: int = 0
    entries: list[dict[str, Any]] = field(default_factory=list)
    pico_by_kind: dict[str, int] = field(default_factory=dict)
    quantity_by_kind: dict[str, int] = field(default_factory=dict)
    events_by_kind: dict[str, int] = field(default_factory=dict)
    experiments: list[dict[str, Any]] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    restores: list[dict[str, Any]] = field(default_factory=list)
    control_intents: list[dict[str, Any]] = field(default_factory=list)
    best: float = math.inf
    attempts: int = 0
    shape: str = "a"
    metric: str = METRIC
    metric_direction: str = METRIC_DIRECTION
    # running sums (usage/actors/truth answers read these instead of rescanning the entries)
    input_tokens: int = 0
    output_tokens: int = 0
    tool_calls: int = 0
    inference_count: int = 0
    tokens_by_model: dict[str, dict[str, int]] = field(default_factory=dict)
    by_role: dict[str, dict[str, int]] = field(default_factory=dict)
    unreadable: set[int] = field(default_factory=set)  # indexes into entries served opaque
    unreadable_sums: dict[str, int] = field(default_factory=lambda: {
        "entries": 0, "input_tokens": 0, "output_tokens": 0, "pico_usd": 0})
    progress_notes: int = 0
    wire_cache: list[dict[str, Any]] = field(default_factory=list)  # entries as served, built once each

    @property
    def exists(self) -> bool:
        return self.state != "pending"

    @property
    def terminal(self) -> bool:
        return self.state in {"done", "failed", "stopped", "canceled"}

    @property
    def live(self) -> bool:
        return self.state == "running" and not self.wedged

    @property
    def orchestrator(self) -> Actor:
        return self.actors[0]


class World:
    """A thread-safe simulated SMR backend state. `tick()` advances it one step; `freeze()` stops it."""

    def __init__(
        self,
        *,
        seed: int = 0,
        project_ids: list[str] | tuple[str, ...] = (DEFAULT_PROJECT_ID,),
        runs: int = 6,
        tick_seconds: float = 1.0,
        start_time: datetime | None = None,
        stagger_ticks: int = 8,
        shapes: list[str] | tuple[str, ...] | str = ("a",),
        unreadable_every: int = 0,
        metrics: list | tuple = DEFAULT_METRICS,
        worker_downgrades: bool = False,
    ):
        """`shapes`: the wire shapes of the free-form fields, one per run, drawn from the seed (with two
        or more, consecutive runs of a project alternate, so a project of >= 2 runs shows each).
        `unreadable_every=N`: every Nth inference entry of a run is served opaque (0: never).
        `metrics`: ((name, "lower_is_better" | "higher_is_better"), ...); run i scores on
        metrics[i % len(metrics)]. `worker_downgrades`: some runs (always index 5) have one worker
        whose resolved profile/model is cheaper than the requested one."""
        if runs < 0:
            raise ValueError("runs must be >= 0")
        if tick_seconds <= 0:
            raise ValueError("tick_seconds must be > 0")
        self.shapes = parse_shapes(shapes)
        if unreadable_every < 0:
            raise ValueError("unreadable_every must be >= 0")
        self.unreadable_every = int(unreadable_every)
        self.metrics = parse_metrics(metrics)
        self.worker_downgrades = bool(worker_downgrades)
        self.seed = seed
        self.org_id = ORG_ID
        self.project_ids = list(dict.fromkeys(project_ids)) or [DEFAULT_PROJECT_ID]
        self.tick_seconds = float(tick_seconds)
        self.start_time = (start_time or datetime.now(UTC)).astimezone(UTC).replace(microsecond=0)
        self.ticks = 0
        self.frozen = False
        self.lock = threading.RLock()
        self._micro = 0  # events within one tick get increasing microsecond offsets
        self._last_stamp: datetime | None = None
        self.runs: dict[str, SimRun] = {}
        self.runs_by_project: dict[str, list[SimRun]] = {pid: [] for pid in self.project_ids}
        self.artifacts: dict[str, tuple[SimRun, dict[str, Any], bytes]] = {}
        for pid in self.project_ids:
            for index in range(runs):
                run = self._plan_run(pid, index, stagger_ticks)
                self.runs[run.run_id] = run
                self.runs_by_project[pid].append(run)
        self._moving: list[SimRun] = list(self.runs.values())  # not yet terminal or wedged, plan order
        self._apply_tick()  # tick 0: the first runs appear

    # ------------------------------------------------------------------ planning and time
    def _plan_run(self, project_id: str, index: int, stagger: int) -> SimRun:
        rng = random.Random(f"smr-sim|{self.seed}|{project_id}|{index}")
        fate = FATES[index] if index < len(FATES) else "climb"
        run_id = _uuid("run", self.seed, project_id, index)
        if fate == "fail":
            run_ticks = rng.randint(14, 22)
        elif fate == "wedge":
            run_ticks = rng.randint(10, 16)
        else:
            run_ticks = rng.randint(45, 75)
        requested = ORCH_PROFILE
        resolved = ORCH_DOWNGRADED_PROFILE if fate == "downgrade" else ORCH_PROFILE
        orch = Actor(_uuid("actor", run_id, 0), "orchestrator", None, resolved, ORCH_PROFILE)
        workers = [
            Actor(_uuid("actor", run_id, k), "worker", orch.actor_id, WORKER_PROFILE)
            for k in range(1, rng.randint(2, 3) + 1)
        ]
        # Everything new is drawn from a separate RNG, so the run's own stream (and every value it
        # produces) is the same whatever the shapes, metrics or downgrade options.
        side = random.Random(f"smr-sim-shape|{self.seed}|{project_id}|{index}")
        downgrade_worker = side.random() < 1 / 3 or index == 5
        which = side.randrange(len(workers))
        if self.worker_downgrades and downgrade_worker:
            workers[which].profile_id = WORKER_DOWNGRADED_PROFILE
        first = random.Random(f"smr-sim-shape|{self.seed}|{project_id}").randrange(len(self.shapes))
        metric, direction = self.metrics[index % len(self.metrics)]
        return SimRun(
            project_id=project_id,
            index=index,
            run_id=run_id,
            fate=fate,
            rng=rng,
            created_tick=index * stagger + (rng.randint(0, 1) if index else 0),
            queue_ticks=rng.randint(1, 3),
            run_ticks=run_ticks,
            baseline=round(rng.uniform(2.2, 2.6), 6),
            floor=round(rng.uniform(0.9, 1.3), 6),
            requested_profile=requested,
            resolved_profile=resolved,
            actors=[orch, *workers],
            shape=self.shapes[(first + index) % len(self.shapes)],
            metric=metric,
            metric_direction=direction,
        )

    def tick_time(self) -> datetime:
        return self.start_time + timedelta(seconds=self.ticks * self.tick_seconds)

    def _stamp(self) -> datetime:
        """A fresh, strictly increasing virtual timestamp inside the current tick."""
        self._micro += 1
        ts = self.tick_time() + timedelta(microseconds=self._micro)
        if self._last_stamp is not None and ts <= self._last_stamp:
            ts = self._last_stamp + timedelta(microseconds=1)
        self._last_stamp = ts
        return ts

    def tick(self, n: int = 1) -> int:
        """Advance `n` ticks unless frozen; returns how many were applied."""
        applied = 0
        with self.lock:
            for _ in range(max(0, n)):
                if self.frozen:
                    break
                self.ticks += 1
                self._micro = 0
                self._apply_tick()
                applied += 1
        return applied

    advance = tick

    def freeze(self) -> None:
        with self.lock:
            self.frozen = True

    def thaw(self) -> None:
        with self.lock:
            self.frozen = False

    # ------------------------------------------------------------------ evolution
    def _apply_tick(self) -> None:
        moving = self._moving
        for run in moving:
            if not (run.terminal or run.wedged):  # a client may have stopped it since the last tick
                self._step_run(run)
        if any(r.terminal or r.wedged for r in moving):
            self._moving = [r for r in moving if not (r.terminal or r.wedged)]

    def _step_run(self, run: SimRun) -> None:
        t = self.ticks
        if run.state == "pending":
            if t >= run.created_tick:
                self._create(run)
            return
        if run.terminal or run.wedged:
            return
        if run.state == "queued":
            if t >= run.created_tick + run.queue_ticks:
                now = self._stamp()
                run.state, run.live_phase = "running", "working"
                run.started_at = run.updated_at = now
            return
        # running
        if run.running_ticks >= run.run_ticks:
            if run.fate == "wedge":
                run.wedged = True  # no further output of any kind; state stays "running"
                run.wedged_at = run.updated_at
                return
            if run.fate == "fail":
                self._finish(run, "failed", failure=dict(FAILURE), reason=FAILURE["reason"])
            else:
                self._finish(run, "done", reason="completed")
            return
        run.running_ticks += 1
        self._activity(run)

    def _create(self, run: SimRun) -> None:
        now = self._stamp()
        run.state, run.live_phase = "queued", "queued"
        run.created_at = run.updated_at = now
        self._message(
            run,
            now,
            mode="queue",
            sender="user",
            target="role:orchestrator",
            action=None,
            status="consumed",
            body=(
                "Improve submission/optimizer.py so that the toy model reaches the lowest val_loss "
                "you can. Score every candidate; keep the best one."
            ),
            payload={"topic": KICKOFF_TOPIC, "source": "trigger"},
        )

    def _finish(self, run: SimRun, state: str, *, failure=None, reason=None, stop_reason=None,
                stop_message=None) -> datetime:
        now = self._stamp()
        run.state, run.live_phase = state, "terminal"
        run.terminal_outcome = state
        run.failure = failure
        run.state_reason = reason
        run.stop_reason, run.stop_reason_message = stop_reason, stop_message
        run.finished_at = run.updated_at = now
        payload: dict[str, Any] = {"topic": "smr.run.terminal", "state": state, "terminal_outcome": state}
        if failure:
            payload["failure"] = dict(failure)
        self._message(
            run,
            now,
            mode="note",
            sender="system",
            target="role:user",
            action=None,
            status="delivered",
            body=f"Run {state}" + (f": {failure['family']}: {failure['detail']}" if failure else ""),
            payload=payload,
        )
        return now

    def _activity(self, run: SimRun) -> None:
        rng = run.rng
        orch = run.orchestrator
        progress = run.running_ticks
        # 1 orchestrator turn
        in_tok = rng.randint(3000, 6000) + 120 * progress
        out_tok = rng.randint(200, 1200)
        tools = sorted(rng.sample(ORCH_TOOLS, rng.randint(0, 3)))
        self._inference(run, orch, in_tok, out_tok, tools, rng.randint(800, 9000))
        # 0-2 worker turns
        workers = run.actors[1:]
        active = [orch]
        for _ in range(rng.choice((0, 1, 1, 2))):
            worker = rng.choice(workers)
            if not worker.dispatched:
                worker.dispatched = True
                self._message(
                    run,
                    self._stamp(),
                    mode="queue",
                    sender="role:orchestrator",
                    target=f"actor:{worker.actor_id}",
                    action=None,
                    status="consumed",
                    body="Sweep the learning-rate schedule and report val_loss for each candidate.",
                    payload={"topic": "smr.orchestrator.dispatch", "actor_id": worker.actor_id},
                )
            in_tok = rng.randint(1500, 6000)
            out_tok = rng.randint(100, 900)
            tools = sorted(rng.sample(WORKER_TOOLS, rng.randint(0, 3)))
            self._inference(run, worker, in_tok, out_tok, tools, rng.randint(500, 6000))
            active.append(worker)
        # sandbox seconds for one of this tick's actors
        sandbox_actor = rng.choice(active)
        seconds = rng.randint(5, 30)
        self._entry(
            run,
            meter_kind="sandbox_seconds",
            actor=sandbox_actor,
            model=None,
            turn_index=None,
            input_tokens=0,
            output_tokens=0,
            cost=seconds * SANDBOX_PICO_PER_SECOND,
            tool_calls=[],
            duration_ms=seconds * 1000,
            quantity=seconds,
            quantity_unit="seconds",
        )
        # maybe a scored attempt
        if rng.random() < (0.6 if run.attempts == 0 else 0.4):
            self._attempt(run)
        if run.shape == "b":
            self._progress_note(run)

    def _progress_note(self, run: SimRun) -> None:
        """Shape "b" runs are chatty: a progress note every live tick. It takes the time of the run's
        last event of this tick (no fresh world timestamp, so every other value stays the same
        whatever the shape); order messages by `seq`."""
        run.progress_notes += 1
        best = "none yet" if run.best == math.inf else f"{self._score(run, run.best):.4f}"
        self._message(
            run,
            run.updated_at,
            mode="note",
            sender="role:orchestrator",
            target="role:user",
            action=None,
            status="delivered",
            body=(f"Progress: tick {run.running_ticks}, {len(run.entries)} ledger entries, "
                  f"{run.attempts} attempts, best {run.metric} {best}."),
            payload={"topic": PROGRESS_TOPIC, "tick": run.running_ticks, "attempts": run.attempts},
        )

    def _inference(self, run: SimRun, actor: Actor, in_tok: int, out_tok: int, tools: list[str],
                   duration_ms: int) -> None:
        price_in, price_out = MODEL_PRICE[actor.model]
        self._entry(
            run,
            meter_kind="inference",
            actor=actor,
            model=actor.model,
            turn_index=actor.turns,
            input_tokens=in_tok,
            output_tokens=out_tok,
            cost=in_tok * price_in + out_tok * price_out,
            tool_calls=tools,
            duration_ms=duration_ms,
            quantity=in_tok + out_tok,
            quantity_unit="tokens",
        )
        actor.turns += 1

    def _entry(self, run: SimRun, *, meter_kind: str, actor: Actor, model, turn_index, input_tokens: int,
               output_tokens: int, cost: int, tool_calls: list[str], duration_ms: int, quantity: int,
               quantity_unit: str) -> None:
        now = self._stamp()
        n = len(run.entries)
        run.entries.append({
            "entry_id": _uuid("entry", run.run_id, n),
            "created_at": iso(now),
            "meter_kind": meter_kind,
            "actor_id": actor.actor_id,
            "actor_role": actor.role,
            "parent_actor_id": actor.parent_actor_id,
            "model": model,
            "turn_index": turn_index,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cost_pico_usd": cost,
            "tool_calls": list(tool_calls),
            "duration_ms": duration_ms,
            "quantity": quantity,
            "quantity_unit": quantity_unit,
        })
        run.pico_by_kind[meter_kind] = run.pico_by_kind.get(meter_kind, 0) + cost
        run.quantity_by_kind[meter_kind] = run.quantity_by_kind.get(meter_kind, 0) + quantity
        run.events_by_kind[meter_kind] = run.events_by_kind.get(meter_kind, 0) + 1
        run.updated_at = now
        # running sums
        inference = meter_kind == "inference"
        run.input_tokens += input_tokens
        run.output_tokens += output_tokens
        run.tool_calls += len(tool_calls)
        if inference:
            row = run.tokens_by_model.setdefault(model, {"input_tokens": 0, "output_tokens": 0, "calls": 0})
            row["input_tokens"] += input_tokens
            row["output_tokens"] += output_tokens
            row["calls"] += 1
        role = run.by_role.setdefault(actor.role, {"cost_pico_usd": 0, "input_tokens": 0, "output_tokens": 0,
                                                   "turns": 0, "events": 0})
        role["cost_pico_usd"] += cost
        role["input_tokens"] += input_tokens
        role["output_tokens"] += output_tokens
        role["turns"] += 1 if inference else 0
        role["events"] += 1
        actor.pico += cost
        actor.events += 1
        actor.input_tokens += input_tokens
        actor.output_tokens += output_tokens
        actor.pico_by_kind[meter_kind] = actor.pico_by_kind.get(meter_kind, 0) + cost
        if model:
            actor.pico_by_model[model] = actor.pico_by_model.get(model, 0) + cost
        actor.latest_at = iso(now)
        if inference:
            run.inference_count += 1
            if self.unreadable_every and run.inference_count % self.unreadable_every == 0:
                run.unreadable.add(n)
                sums = run.unreadable_sums
                sums["entries"] += 1
                sums["input_tokens"] += input_tokens
                sums["output_tokens"] += output_tokens
                sums["pico_usd"] += cost

    @staticmethod
    def _score(run: SimRun, loss: float) -> float:
        """The run's metric for an internal loss value. The climb is computed as a loss; a
        higher_is_better metric mirrors it (100 - 10 * loss: finite, positive, strictly monotonic on
        the 6-decimal grid), so "improvement" means the same attempt whatever the direction."""
        if run.metric_direction == "higher_is_better":
            return round(100.0 - 10.0 * loss, 6)
        return loss

    def _attempt(self, run: SimRun) -> None:
        rng = run.rng
        n = run.attempts
        run.attempts += 1
        span = run.baseline - run.floor
        value = run.floor + span * math.exp(-0.07 * (n + 1)) + rng.gauss(0.0, 0.07 * span)
        if rng.random() < 0.15:  # now and then a clearly bad idea
            value += rng.uniform(0.1, 0.4) * span
        value = round(max(value, run.floor * 0.9), 6)
        hparams = {
            "lr": round(10 ** rng.uniform(-4, -2), 6),
            "beta1": round(rng.uniform(0.85, 0.95), 3),
            "beta2": round(rng.uniform(0.95, 0.999), 4),
            "weight_decay": round(rng.choice((0.0, 0.01, 0.05, 0.1)), 2),
            "warmup_steps": rng.choice((0, 50, 100, 200)),
        }
        improved = value < run.best
        best_before = None if run.best == math.inf else run.best
        metric = run.metric
        score = self._score(run, value)
        baseline = self._score(run, run.baseline)
        verb = "lowers" if run.metric_direction == "lower_is_better" else "raises"
        now = self._stamp()
        experiment_id = _uuid("experiment", run.run_id, n)
        result_id = _uuid("result", run.run_id, n)
        artifact_id = _uuid("artifact", run.run_id, n) if improved else None
        title = f"Attempt {n + 1}: lr={hparams['lr']:.2e}, wd={hparams['weight_decay']}"
        run.experiments.append({
            "experiment_id": experiment_id,
            "org_id": self.org_id,
            "project_id": run.project_id,
            "run_id": run.run_id,
            "title": title,
            "kind": "optimization",
            "hypothesis": (
                f"AdamW with lr={hparams['lr']:.2e}, betas=({hparams['beta1']}, {hparams['beta2']}), "
                f"weight_decay={hparams['weight_decay']} and {hparams['warmup_steps']} warmup steps "
                f"{verb} {metric}"
            ),
            "status": "completed",
            "verdict": "improved" if improved else "no_improvement",
            "metrics_before": {metric: self._score(run, best_before) if best_before is not None else baseline},
            "metrics_after": {metric: score},
            "linked_artifact_ids": [artifact_id] if artifact_id else [],
            "revision": 1,
            "metadata": {"attempt_index": n, "hparams": hparams},
            "created_at": iso(now),
            "updated_at": iso(now),
        })
        run.results.append({
            "result_id": result_id,
            "org_id": self.org_id,
            "project_id": run.project_id,
            "experiment_id": experiment_id,
            "run_id": run.run_id,
            "candidate_id": artifact_id,
            "metric": metric,
            "metric_direction": run.metric_direction,
            "value": score,
            "baseline_value": baseline,
            "delta": round(score - baseline, 6),
            "comparison_cohort_key": COHORT_KEY if metric == METRIC else f"toy-optimizer/{metric}/v1",
            "truth_status": "observed",
            "metadata": {"attempt_index": n, "improvement": improved},
            "created_at": iso(now),
        })
        run.updated_at = now
        if improved:
            run.best = value
            self._improvement(run, n, value, hparams, experiment_id, result_id, artifact_id, now)

    def _improvement(self, run: SimRun, n: int, value: float, hparams: dict[str, Any], experiment_id: str,
                     result_id: str, artifact_id: str, now: datetime) -> None:
        rng = run.rng
        metric = run.metric
        value = self._score(run, value)  # the loss, as the run's metric
        content = render_optimizer(run.run_id, n, value, self._score(run, run.baseline), hparams,
                                   metric=metric).encode()
        digest = "sha256:" + hashlib.sha256(content).hexdigest()
        artifact = {
            "artifact_id": artifact_id,
            "project_id": run.project_id,
            "run_id": run.run_id,
            "artifact_type": "submission",
            "title": f"optimizer.py ({metric} {value:.4f})",
            "uri": f"s3://smr-simulator/{run.run_id}/{artifact_id}/optimizer.py",
            "digest": digest,
            "path": SUBMISSION_PATH,
            "size_bytes": len(content),
            "content_type": SUBMISSION_CONTENT_TYPE,
            "content_url": f"/smr/artifacts/{artifact_id}/content",
            "created_at": iso(now),
            "metadata": {
                "experiment_id": experiment_id,
                "result_id": result_id,
                "score": value,
                "metric": metric,
                "attempt_index": n,
            },
        }
        run.artifacts.append(artifact)
        self.artifacts[artifact_id] = (run, artifact, content)
        k = len(run.checkpoints)
        # Some checkpoints fail; the second one of each project's first run always does, so every
        # world shows one.
        failed = rng.random() < 0.2 or (run.index == 0 and k == 1)
        checkpoint_id = _uuid("checkpoint", run.run_id, k)
        commit = _digest("commit", run.run_id, k)[:40]
        workspace = f"/workspace/runs/{run.run_id}/checkpoints/{checkpoint_id}"
        parent = run.checkpoints[-1]["checkpoint_id"] if run.checkpoints else None
        run.checkpoints.append({
            "checkpoint_id": checkpoint_id,
            "artifact_id": _uuid("checkpoint-artifact", run.run_id, k),
            "artifact_type": "checkpoint",
            "run_id": run.run_id,
            "project_id": run.project_id,
            "captured_at": iso(now),
            "created_at": iso(now),
            "cadence_source": "per_milestone",
            "scope": "full",
            "parent_checkpoint_id": parent,
            "descriptor_digest": "sha256:" + _digest("descriptor", checkpoint_id),
            "size_bytes": None if failed else 1_000_000 + rng.randint(0, 4_000_000),
            "state": "failed" if failed else "ready",
            "uri": None if failed else f"s3://smr-simulator/{run.run_id}/checkpoints/{checkpoint_id}.tar.zst",
            "error_code": "workspace_missing" if failed else None,
            "restorable": not failed,
            "branchable": not failed,
            "metadata": {
                "label": f"improvement {k + 1}: {metric}={value:.4f}",
                "commit": commit,
                "failure_reason": f"RuntimeError: workspace does not exist: {workspace}" if failed else None,
                "failure_source": "checkpoint_capture" if failed else None,
                "experiment_id": experiment_id,
                "artifact_id": artifact_id,
            },
        })
        self._message(
            run,
            self._stamp(),
            mode="note",
            sender="role:orchestrator",
            target="role:user",
            action=None,
            status="delivered",
            body=f"New best {metric} {value:.4f} (attempt {n + 1}); saved {SUBMISSION_PATH}.",
            payload={
                "topic": "smr.experiment.improvement",
                "experiment_id": experiment_id,
                "result_id": result_id,
                "artifact_id": artifact_id,
                "checkpoint_id": checkpoint_id,
                metric: value,
            },
        )

    def _message(self, run: SimRun, now: datetime, *, mode: str, sender: str, target: str | None,
                 action: str | None, status: str, body: str, payload: dict[str, Any]) -> dict[str, Any]:
        seq = len(run.messages) + 1
        message = {
            "message_id": _uuid("message", run.run_id, seq),
            "created_at": iso(now),
            "seq": seq,
            "run_id": run.run_id,
            "topic": payload["topic"],
            "mode": mode,
            "sender": sender,
            "target": target,
            "action": action,
            "body": body,
            "payload": payload,
            "status": status,
        }
        run.messages.append(message)
        run.updated_at = now
        return message

    # ------------------------------------------------------------------ client actions
    def get_run(self, run_id: str, project_id: str | None = None) -> SimRun:
        run = self.runs.get(run_id)
        if run is None or not run.exists or (project_id is not None and run.project_id != project_id):
            raise NotFound("Run not found")
        return run

    def stop(self, run_id: str, project_id: str | None = None) -> dict[str, Any]:
        with self.lock:
            run = self.get_run(run_id, project_id)
            if run.terminal:
                raise Conflict({
                    "error_code": "terminal_run",
                    "message": f"Run is already terminal ({run.state}); nothing to stop.",
                    "retryable": False,
                    "current_state": run.state,
                    "run_id": run.run_id,
                })
            intent_id = _uuid("control", run.run_id, len(run.control_intents))
            now = self._stamp()
            run.control_intents.append({"control_intent_id": intent_id, "action": "stop", "ack_at": iso(now)})
            self._message(
                run,
                now,
                mode="interrupt",
                sender="user",
                target="role:orchestrator",
                action="stop",
                status="consumed",
                body="Stop requested through the API.",
                payload={"topic": "smr.control.stop", "control_intent_id": intent_id},
            )
            self._finish(run, "stopped", reason="user_requested", stop_reason="user_requested",
                         stop_message="Stopped through the API")
            run.wedged = False
            wire = self.run_wire(run)
            wire.update({
                "control_intent_id": intent_id,
                "control_intent_ack_at": iso(now),
                "enqueue_status": "accepted",
                # the spec's compact receipt fields too, so the answer is both shapes at once
                "control_kind": "stop",
                "requested_state": "stopped",
                "terminal_state": "stopped",
                "durable_state": "stopped",
                "accepted_at": iso(now),
                "status_url": f"/smr/projects/{run.project_id}/runs/{run.run_id}",
            })
            return wire

    def restore(self, run_id: str, project_id: str | None, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            run = self.get_run(run_id, project_id)
            checkpoint_id = body.get("checkpoint_id") or body.get("checkpoint_record_id")
            checkpoint = next((c for c in run.checkpoints if c["checkpoint_id"] == checkpoint_id
                               or c["artifact_id"] == checkpoint_id), None)
            if checkpoint is None and body.get("checkpoint_uri"):
                checkpoint = next((c for c in run.checkpoints if c["uri"] == body["checkpoint_uri"]), None)
            if checkpoint is None:
                raise NotFound("Checkpoint not found")
            if not checkpoint["restorable"]:
                raise Conflict({
                    "error_code": "checkpoint_not_restorable",
                    "message": f"Checkpoint {checkpoint['checkpoint_id']} is {checkpoint['state']}; "
                               "it cannot be restored.",
                    "retryable": False,
                    "current_state": checkpoint["state"],
                    "run_id": run.run_id,
                })
            now = self._stamp()
            ack = {
                "accepted": True,
                "run_id": run.run_id,
                "action": "restore",
                "runtime_message_id": None,
                "state": "accepted",
                "checkpoint_id": checkpoint["checkpoint_id"],
                "requested_at": iso(now),
                "mode": body.get("mode") or "in_place",
                "child_run_id": None,
            }
            run.restores.append({**ack, "reason": body.get("reason")})
            return ack

    # ------------------------------------------------------------------ wire shapes (call under lock)
    def project_wire(self, project_id: str) -> dict[str, Any]:
        runs = [r for r in self.runs_by_project[project_id] if r.exists]
        active = [r for r in runs if not r.terminal]
        created = iso(self.start_time)
        return {
            "project_id": project_id,
            "project_alias": project_id,
            "org_id": self.org_id,
            "name": f"Simulated project {project_id}",
            "timezone": "UTC",
            "schedule": {},
            "budgets": {},
            "key_policy": {},
            "integrations": {},
            "onboarding_state": {},
            "research": {},
            "synth_ai": {},
            "policy": {},
            "trial_matrix": {},
            "execution": {},
            "created_at": created,
            "updated_at": created,
            "archived": False,
            "active_run_id": active[-1].run_id if active else None,
            "latest_run_id": runs[-1].run_id if runs else None,
        }

    def run_wire(self, run: SimRun) -> dict[str, Any]:
        terminal = run.terminal
        authority = {"queued": "queued", "running": "running"}.get(run.state, "terminal")
        lifecycle = {
            "authority_phase": authority,
            "bootstrap_phase": "dispatch_pending" if run.state == "queued" else "ready",
            "terminal_phase": run.state if terminal else "none",
            "terminal_outcome": run.terminal_outcome,
            "dispatch": {"owner": "smr-dispatcher", "pool_id": "sim-docker-pool", "host_kind": "docker"},
            "failure": dict(run.failure) if run.failure else None,
            "metadata": {},
            "updated_at": iso(run.updated_at),
        }
        model = PROFILE_MODEL[run.resolved_profile]
        roles = {
            "orchestrator": {
                "model": model,
                "agent_harness": "codex",
                "params": {"reasoning_effort": "medium"},
                "requested_profile_id": run.requested_profile,
                "resolved_profile_id": run.resolved_profile,
            },
            "reviewer": {"model": "gpt-5.4", "agent_harness": "codex"},
            "worker": {
                "permitted_models": [PROFILE_MODEL[WORKER_PROFILE]],
                "default_model": PROFILE_MODEL[WORKER_PROFILE],
                "requested_profile_id": WORKER_PROFILE,
                "resolved_profile_id": WORKER_PROFILE,
            },
        }
        if self.worker_downgrades:
            # Per worker actor: requested vs resolved. `roles` is a free-form object in the spec and
            # the SDK's SmrRoleBindings ignores keys it does not know; the per-actor usage rows
            # forbid extra keys, so this is where a worker's requested profile travels.
            workers = run.actors[1:]
            downgraded = next((a for a in workers if a.downgraded), None)
            if downgraded is not None:
                roles["worker"]["resolved_profile_id"] = downgraded.profile_id
            roles["workers"] = [
                {"actor_id": a.actor_id, "requested_profile_id": a.requested_profile_id,
                 "resolved_profile_id": a.profile_id, "requested_model": a.requested_model, "model": a.model}
                for a in workers
            ]
        return {
            "run_id": run.run_id,
            "org_id": self.org_id,
            "project_id": run.project_id,
            "runbook": "lite",
            "trigger": "api",
            "state": run.state,
            "terminal_outcome": run.terminal_outcome,
            "live_phase": run.live_phase,
            "state_reason": run.state_reason,
            "state_authority": "backend_public_run_state_projection.v1",
            "work_completed": run.state == "done",
            **_run_timestamps(run),
            "stop_reason": run.stop_reason,
            "stop_reason_message": run.stop_reason_message,
            "host_kind": "docker",
            "resolved_host_kind": "docker",
            "work_mode": "open_ended_discovery",
            "resolved_work_mode": "open_ended_discovery",
            "limit": {"budget_usd": BUDGET_USD, "max_spend_usd": BUDGET_USD},
            "roles": roles,
            "status_detail": {
                "summary": f"{run.state} ({run.live_phase})",
                "last_activity_at": iso(run.updated_at),
            },
            "lifecycle": lifecycle,
            "latest_summary_artifact_id": None,
        }

    def entries_wire(self, run: SimRun) -> list[dict[str, Any]]:
        """The usage entries as served (in the run's shape; opaque where unreadable). Entries never
        change, so each is rendered once and kept."""
        cache = run.wire_cache
        for n in range(len(cache), len(run.entries)):
            entry = run.entries[n]
            if n in run.unreadable:
                cache.append(_opaque_entry(run, n))
            elif run.shape == "b":
                cache.append(_entry_b(entry))
            else:
                cache.append(entry)
        return list(cache)

    def usage_wire(self, run: SimRun) -> dict[str, Any]:
        total = sum(run.pico_by_kind.values())
        cents = pico_to_cents(total)
        usd = pico_to_usd(total)
        in_tok, out_tok = run.input_tokens, run.output_tokens
        inference_events = run.events_by_kind.get("inference", 0)
        sandbox_events = run.events_by_kind.get("sandbox_seconds", 0)
        sandbox_seconds = run.quantity_by_kind.get("sandbox_seconds", 0)
        worker_turns = sum(a.turns for a in run.actors[1:])
        if run.shape == "b":
            return {
                "run_id": run.run_id,
                "project_id": run.project_id,
                "cost": {
                    "total_cents": cents,
                    "charged_cents": cents,
                    "internal_cost_cents": cents,
                    "total_usd": usd,
                    "charged_usd": usd,
                    "internal_cost_usd": usd,
                },
                "totals": {
                    "prompt_tokens": in_tok,
                    "completion_tokens": out_tok,
                    "llm_calls": inference_events,
                    "sandbox_sessions": sandbox_events,
                    "sandbox_seconds_billed": sandbox_seconds,
                    "tool_invocations": run.tool_calls,
                    "lead_turns": run.orchestrator.turns,
                    "subagent_turns": worker_turns,
                    "line_items": len(run.entries),
                },
                "breakdown": {
                    "meters": {
                        B_METER[kind]: {"cost_usd": pico_to_usd_text(pico), "cost_cents": pico_to_cents(pico),
                                        "units": run.quantity_by_kind.get(kind, 0),
                                        "unit": B_UNIT[_UNITS[kind]],
                                        "line_items": run.events_by_kind.get(kind, 0)}
                        for kind, pico in sorted(run.pico_by_kind.items())
                    },
                    "roles": {
                        B_ENTRY_ROLE[role]: {"cost_usd": pico_to_usd_text(row["cost_pico_usd"]),
                                             "prompt_tokens": row["input_tokens"],
                                             "completion_tokens": row["output_tokens"],
                                             "llm_calls": row["turns"], "line_items": row["events"]}
                        for role, row in run.by_role.items()
                    },
                },
                "entries": self.entries_wire(run),
                "rows": [],
                "total_cost_cents": cents,
                "total_charged_cents": cents,
                "total_internal_cost_cents": cents,
                "total_cost_usd": usd,
                "total_charged_usd": usd,
                "total_internal_cost_usd": usd,
            }
        tokens = {
            "sessions_seen": sum(1 for a in run.actors if a.turns),
            "totals": {"input_tokens": in_tok, "output_tokens": out_tok, "total_tokens": in_tok + out_tok},
            "by_model": {model: dict(row) for model, row in run.tokens_by_model.items()},
        }
        by_role = {role: dict(row) for role, row in run.by_role.items()}
        cost = {
            "total_cents": cents,
            "charged_cents": cents,
            "internal_cost_cents": cents,
            "total_pico_usd": total,
            "charged_pico_usd": total,
            "internal_cost_pico_usd": total,
            "total_usd": usd,
            "charged_usd": usd,
            "internal_cost_usd": usd,
        }
        return {
            "run_id": run.run_id,
            "project_id": run.project_id,
            "cost": cost,
            "totals": {
                "input_tokens": in_tok,
                "output_tokens": out_tok,
                "total_tokens": in_tok + out_tok,
                "inference_events": inference_events,
                "sandbox_events": sandbox_events,
                "sandbox_seconds": sandbox_seconds,
                "tool_calls": run.tool_calls,
                "orchestrator_turns": run.orchestrator.turns,
                "worker_turns": worker_turns,
                "entries": len(run.entries),
            },
            "tokens": tokens,
            "token_usage": tokens,
            "breakdown": {"by_meter": self._by_meter(run), "by_actor_role": by_role},
            "entries": self.entries_wire(run),
            "rows": [],
            "total_cost_cents": cents,
            "total_charged_cents": cents,
            "total_internal_cost_cents": cents,
            "total_cost_pico_usd": total,
            "total_charged_pico_usd": total,
            "total_internal_cost_pico_usd": total,
            "total_cost_usd": usd,
            "total_charged_usd": usd,
            "total_internal_cost_usd": usd,
        }

    def _by_meter(self, run: SimRun) -> list[dict[str, Any]]:
        if run.shape == "b":
            return [
                {
                    "meter_kind": B_METER[kind],
                    "billed_amount_cents": pico_to_cents(pico),
                    "billed_amount_usd": pico_to_usd(pico),
                    "quantity": run.quantity_by_kind.get(kind, 0),
                    "quantity_unit": B_UNIT[_UNITS[kind]],
                    "event_count": run.events_by_kind.get(kind, 0),
                }
                for kind, pico in sorted(run.pico_by_kind.items())
            ]
        return [
            {
                "meter_kind": kind,
                "billed_amount_cents": pico_to_cents(pico),
                "billed_amount_pico_usd": pico,
                "billed_amount_usd": pico_to_usd(pico),
                "quantity": run.quantity_by_kind.get(kind, 0),
                "quantity_unit": _UNITS[kind],
                "event_count": run.events_by_kind.get(kind, 0),
            }
            for kind, pico in sorted(run.pico_by_kind.items())
        ]

    def cost_summary_wire(self, run: SimRun) -> dict[str, Any]:
        total = sum(run.pico_by_kind.values())
        if run.shape == "b":
            return {
                "run_id": run.run_id,
                "project_id": run.project_id,
                "total_cents": pico_to_cents(total),
                "total_usd": pico_to_usd(total),
                "recording_status": "complete",
                "missing_meters": [],
                "by_meter": self._by_meter(run),
            }
        return {
            "run_id": run.run_id,
            "project_id": run.project_id,
            "total_cents": pico_to_cents(total),
            "total_pico_usd": total,
            "total_usd": pico_to_usd(total),
            "recording_status": "complete",
            "missing_meters": [],
            "by_meter": self._by_meter(run),
        }

    def actor_usage_wire(self, run: SimRun) -> dict[str, Any]:
        rows = []
        b = run.shape == "b"
        for actor in run.actors:
            if not actor.events:
                continue
            cents = pico_to_cents(actor.pico)
            by_kind = actor.pico_by_kind
            if b:
                by_provider = {B_PROVIDER[k]: pico_to_cents(v) for k, v in sorted(by_kind.items())}
                by_source_type = {B_METER[k]: pico_to_cents(v) for k, v in sorted(by_kind.items())}
                token_usage = {"prompt_tokens": actor.input_tokens, "completion_tokens": actor.output_tokens,
                               "total_tokens": actor.input_tokens + actor.output_tokens}
                role = B_PARTICIPANT_ROLE[actor.role]
            else:
                by_provider = {"openai": pico_to_cents(by_kind.get("inference", 0)),
                               "sandbox": pico_to_cents(by_kind.get("sandbox_seconds", 0))}
                by_source_type = {k: pico_to_cents(v) for k, v in sorted(by_kind.items())}
                token_usage = {"input_tokens": actor.input_tokens, "output_tokens": actor.output_tokens}
                role = actor.role
            rows.append({
                "actor_id": actor.actor_id,
                "org_id": self.org_id,
                "project_id": run.project_id,
                "run_id": run.run_id,
                "task_id": None,
                "task_key": None,
                "worker_id": actor.actor_id if actor.role == "worker" else None,
                "participant_role": role,
                "nominal_amount_cents": cents,
                "billed_amount_cents": cents,
                "internal_cost_cents": cents,
                "event_count": actor.events,
                "latest_usage_at": actor.latest_at,
                "by_provider": by_provider,
                "by_source_type": by_source_type,
                "by_source_subtype": {},
                "by_model": {k: pico_to_cents(v) for k, v in sorted(actor.pico_by_model.items())},
                "token_usage": token_usage,
            })
        return {"org_id": self.org_id, "project_id": run.project_id, "run_id": run.run_id,
                "count": len(rows), "actors": rows}

    def manifest_wire(self, run: SimRun) -> dict[str, Any]:
        return {
            "schema_version": "smr.run_artifact_manifest.v1",
            "project_id": run.project_id,
            "run_id": run.run_id,
            "generated_at": iso(self.tick_time()),
            "artifact_count": len(run.artifacts),
            "artifacts": [_copy_artifact(a) for a in run.artifacts],
            "output_files": [],
            "result_outputs": [],
            "reports": [],
            "pull_requests": [],
            "result_json": None,
            "workspace_archive": {},
            "models": [],
            "datasets": [],
            "links": {},
        }

    def artifact_wire(self, artifact_id: str) -> dict[str, Any]:
        """`GET /smr/artifacts/{id}` (spec SmrArtifactResponse: path/size/type live in metadata)."""
        _, artifact, _ = self.artifact(artifact_id)
        return {
            "artifact_id": artifact["artifact_id"],
            "run_id": artifact["run_id"],
            "project_id": artifact["project_id"],
            "artifact_type": artifact["artifact_type"],
            "title": artifact["title"],
            "uri": artifact["uri"],
            "digest": artifact["digest"],
            "metadata": {**artifact["metadata"], "path": artifact["path"],
                         "size_bytes": artifact["size_bytes"], "content_type": artifact["content_type"]},
            "created_at": artifact["created_at"],
        }

    def artifact(self, artifact_id: str) -> tuple[SimRun, dict[str, Any], bytes]:
        found = self.artifacts.get(artifact_id)
        if found is None:
            raise NotFound("Artifact not found")
        return found

    def checkpoints_wire(self, run: SimRun) -> list[dict[str, Any]]:
        return [{**c, "metadata": dict(c["metadata"])} for c in run.checkpoints]

    def messages_wire(self, run: SimRun, *, status: str | None = None, viewer_targets: list[str] | None = None,
                      limit: int = 200) -> list[dict[str, Any]]:
        items = run.messages
        if status:
            items = [m for m in items if m["status"] == status]
        if viewer_targets:
            items = [m for m in items if m["target"] in viewer_targets]
        items = items[-limit:] if limit else []
        return [{**m, "payload": dict(m["payload"])} for m in items]

    def experiments_wire(self, project_id: str, *, run_id: str | None, limit: int) -> list[dict[str, Any]]:
        rows = [e for r in self.runs_by_project[project_id] for e in r.experiments
                if run_id is None or r.run_id == run_id]
        rows.sort(key=lambda e: (e["created_at"], e["experiment_id"]), reverse=True)
        return [_deep_copy_row(e) for e in rows[:limit]]

    def experiment_wire(self, project_id: str, experiment_id: str) -> dict[str, Any]:
        for run in self.runs_by_project[project_id]:
            for e in run.experiments:
                if e["experiment_id"] == experiment_id:
                    return _deep_copy_row(e)
        raise NotFound("Experiment not found")

    def results_wire(self, project_id: str, *, experiment_id: str | None, metric: str | None,
                     comparison_cohort_key: str | None, truth_status: str | None, limit: int) -> list[dict]:
        rows = [x for r in self.runs_by_project[project_id] for x in r.results]
        if experiment_id:
            rows = [x for x in rows if x["experiment_id"] == experiment_id]
        if metric:
            rows = [x for x in rows if x["metric"] == metric]
        if comparison_cohort_key:
            rows = [x for x in rows if x["comparison_cohort_key"] == comparison_cohort_key]
        if truth_status:
            rows = [x for x in rows if x["truth_status"] == truth_status]
        rows.sort(key=lambda x: (x["created_at"], x["result_id"]), reverse=True)
        return [_deep_copy_row(x) for x in rows[:limit]]

    def list_runs(self, project_id: str, *, states: set[str] | None = None, active_only: bool = False,
                  created_after: datetime | None = None, created_before: datetime | None = None,
                  after: tuple[datetime, str] | None = None, limit: int = 50) -> list[SimRun]:
        """Newest first (created_at, then run_id, descending); `after` is a keyset cursor."""
        runs = [r for r in self.runs_by_project[project_id] if r.exists]
        if states:
            runs = [r for r in runs if r.state in states]
        if active_only:
            runs = [r for r in runs if not r.terminal]
        if created_after:
            runs = [r for r in runs if r.created_at >= created_after]
        if created_before:
            runs = [r for r in runs if r.created_at <= created_before]
        runs.sort(key=lambda r: (r.created_at, r.run_id), reverse=True)
        if after:
            runs = [r for r in runs if (r.created_at, r.run_id) < after]
        return runs[:limit]

    # ------------------------------------------------------------------ ground truth
    def state(self) -> dict[str, Any]:
        with self.lock:
            return {
                "seed": self.seed,
                "ticks": self.ticks,
                "tick_seconds": self.tick_seconds,
                "frozen": self.frozen,
                "start_time": iso(self.start_time),
                "now": iso(self.tick_time()),
                "org_id": self.org_id,
                "config": {"shapes": list(self.shapes), "unreadable_every": self.unreadable_every,
                           "metrics": [list(m) for m in self.metrics],
                           "worker_downgrades": self.worker_downgrades},
                "projects": {
                    pid: {"runs": [self._truth(r) for r in runs if r.exists]}
                    for pid, runs in self.runs_by_project.items()
                },
            }

    def _truth(self, run: SimRun) -> dict[str, Any]:
        total = sum(run.pico_by_kind.values())
        unread = run.unreadable_sums
        return {
            "run_id": run.run_id,
            "project_id": run.project_id,
            "index": run.index,
            "fate": run.fate,
            "shape": run.shape,
            "metric": run.metric,
            "metric_direction": run.metric_direction,
            "state": run.state,
            "live_phase": run.live_phase,
            "terminal_outcome": run.terminal_outcome,
            "failure": dict(run.failure) if run.failure else None,
            "wedged": run.wedged,
            "wedged_at": iso(run.wedged_at) if run.wedged_at else None,
            "stop_reason": run.stop_reason,
            **_run_timestamps(run),
            "requested_profile_id": run.requested_profile,
            "resolved_profile_id": run.resolved_profile,
            "downgraded": run.requested_profile != run.resolved_profile,
            "worker_downgraded": any(a.downgraded for a in run.actors[1:]),
            "actors": [
                {"actor_id": a.actor_id, "role": a.role, "requested_profile_id": a.requested_profile_id,
                 "resolved_profile_id": a.profile_id, "requested_model": a.requested_model,
                 "actual_model": a.model, "events": a.events}
                for a in run.actors
            ],
            "budget_usd": BUDGET_USD,
            "usage": {
                "entries": len(run.entries),
                "inference_events": run.events_by_kind.get("inference", 0),
                "sandbox_events": run.events_by_kind.get("sandbox_seconds", 0),
                "sandbox_seconds": run.quantity_by_kind.get("sandbox_seconds", 0),
                "input_tokens": run.input_tokens,
                "output_tokens": run.output_tokens,
                "orchestrator_turns": run.orchestrator.turns,
                "worker_turns": sum(a.turns for a in run.actors[1:]),
                "total_pico_usd": total,
                "total_cents": pico_to_cents(total),
                "total_usd": pico_to_usd(total),
                "by_meter": {
                    kind: {"pico_usd": pico, "cents": pico_to_cents(pico),
                           "quantity": run.quantity_by_kind.get(kind, 0),
                           "events": run.events_by_kind.get(kind, 0)}
                    for kind, pico in sorted(run.pico_by_kind.items())
                },
                "by_role": {role: dict(row) for role, row in run.by_role.items()},
            },
            "unreadable": {"entries": unread["entries"], "input_tokens": unread["input_tokens"],
                           "output_tokens": unread["output_tokens"], "pico_usd": unread["pico_usd"],
                           "cents": pico_to_cents(unread["pico_usd"])},
            "scores": [
                {"result_id": x["result_id"], "experiment_id": x["experiment_id"], "value": x["value"],
                 "created_at": x["created_at"], "improvement": x["metadata"]["improvement"]}
                for x in run.results
            ],
            "best_score": None if run.best == math.inf else self._score(run, run.best),
            "artifacts": [
                {"artifact_id": a["artifact_id"], "digest": a["digest"], "size_bytes": a["size_bytes"],
                 "path": a["path"], "experiment_id": a["metadata"]["experiment_id"],
                 "score": a["metadata"]["score"], "created_at": a["created_at"]}
                for a in run.artifacts
            ],
            "checkpoints": [
                {"checkpoint_id": c["checkpoint_id"], "state": c["state"], "captured_at": c["captured_at"],
                 "failure_reason": c["metadata"]["failure_reason"]}
                for c in run.checkpoints
            ],
            "messages": {"count": len(run.messages), "last_seq": run.messages[-1]["seq"] if run.messages else 0,
                         "progress_notes": run.progress_notes},
            "restores": [dict(r) for r in run.restores],
            "control_intents": [dict(c) for c in run.control_intents],
        }


_UNITS = {"inference": "tokens", "sandbox_seconds": "seconds"}


def _entry_b(e: dict[str, Any]) -> dict[str, Any]:
    """A usage entry in shape "b" (docs/simulator.md, "Shapes")."""
    out: dict[str, Any] = {
        "id": e["entry_id"],
        "recorded_at": e["created_at"],
        "meter": B_METER[e["meter_kind"]],
        "actor": {"id": e["actor_id"], "role": B_ENTRY_ROLE[e["actor_role"]], "parent_id": e["parent_actor_id"]},
    }
    if e["meter_kind"] == "inference":
        out["model_name"] = e["model"]
        out["step"] = e["turn_index"]
        out["tokens"] = {"input": e["input_tokens"], "output": e["output_tokens"]}
    out["cost_usd"] = pico_to_usd_text(e["cost_pico_usd"])
    out["tool_calls"] = [{"name": name} for name in e["tool_calls"]]
    out["latency_ms"] = e["duration_ms"]
    out["units"] = e["quantity"]
    out["unit"] = B_UNIT[e["quantity_unit"]]
    return out


def _opaque_entry(run: SimRun, n: int) -> dict[str, Any]:
    """An entry no reader can understand: an encrypted-looking blob, nothing else."""
    blob = bytes.fromhex(_digest("opaque", run.run_id, n) + _digest("opaque-2", run.run_id, n))
    return {"opaque": base64.b64encode(blob).decode()}


def _run_timestamps(run: SimRun) -> dict[str, str | None]:
    """The run's lifecycle times as the wire shows them (ISO, None when not reached)."""
    return {
        "created_at": iso(run.created_at),
        "started_at": iso(run.started_at) if run.started_at else None,
        "finished_at": iso(run.finished_at) if run.finished_at else None,
        "updated_at": iso(run.updated_at),
    }


def _copy_artifact(a: dict[str, Any]) -> dict[str, Any]:
    return {**a, "metadata": dict(a["metadata"])}


def _deep_copy_row(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v) for k, v in row.items()}


def render_optimizer(run_id: str, attempt: int, value: float, baseline: float, hp: dict[str, Any],
                     metric: str = METRIC) -> str:
    """The submission an improvement produces: a small, importable optimizer module."""
    return f'''"""AdamW variant found by SMR run {run_id}, attempt {attempt + 1}.

{metric}: {value:.6f} (baseline {baseline:.6f}, delta {value - baseline:+.6f})
"""

import math

HPARAMS = {{
    "lr": {hp["lr"]!r},
    "beta1": {hp["beta1"]!r},
    "beta2": {hp["beta2"]!r},
    "weight_decay": {hp["weight_decay"]!r},
    "warmup_steps": {hp["warmup_steps"]!r},
    "eps": 1e-8,
}}


def lr_at(step, total_steps, base_lr=HPARAMS["lr"], warmup=HPARAMS["warmup_steps"]):
    """Linear warmup, then cosine decay to zero."""
    if warmup and step < warmup:
        return base_lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, total_steps - warmup)
    return base_lr * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


class Optimizer:
    """Decoupled weight decay Adam over plain lists of floats."""

    def __init__(self, params, total_steps=1000, **overrides):
        self.params = params
        self.hp = {{**HPARAMS, **overrides}}
        self.total_steps = total_steps
        self.m = [0.0] * len(params)
        self.v = [0.0] * len(params)
        self.t = 0

    def step(self, grads):
        hp = self.hp
        self.t += 1
        lr = lr_at(self.t - 1, self.total_steps, hp["lr"], hp["warmup_steps"])
        for i, g in enumerate(grads):
            self.m[i] = hp["beta1"] * self.m[i] + (1 - hp["beta1"]) * g
            self.v[i] = hp["beta2"] * self.v[i] + (1 - hp["beta2"]) * g * g
            m_hat = self.m[i] / (1 - hp["beta1"] ** self.t)
            v_hat = self.v[i] / (1 - hp["beta2"] ** self.t)
            self.params[i] -= lr * (m_hat / (math.sqrt(v_hat) + hp["eps"]) + hp["weight_decay"] * self.params[i])
        return self.params
'''
