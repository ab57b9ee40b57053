"""The world's records: an `Actor` and a `SimRun` with everything the run has emitted so far.

Plain dataclasses, no behaviour beyond derived properties; the mixins of `World` write them. A run
also keeps running sums, so that wire answers never rescan its entries.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from smrweb.simulator.world.constants import METRIC, METRIC_DIRECTION, PROFILE_MODEL


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
    branched_from: str | None = None  # the checkpoint of another run this one was branched from
    control_intents: list[dict[str, Any]] = field(default_factory=list)
    pending_replies: list[tuple[dict[str, Any], int]] = field(default_factory=list)  # (message, due tick)
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
    unreadable_sums: dict[str, int] = field(
        default_factory=lambda: {"entries": 0, "input_tokens": 0, "output_tokens": 0, "pico_usd": 0}
    )
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
        return self.state == "running" and not self.wedged  # a paused run is not live

    @property
    def orchestrator(self) -> Actor:
        return self.actors[0]
