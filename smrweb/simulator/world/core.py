"""`World`: the facade the server and the tests use. It owns the options, the clock and the lock.

Each noun lives in a mixin of its own module (runs, activity, usage, experiments, artifacts,
checkpoints, messages, projects, truth); `World` only combines them and keeps time. Every value is a
function of the seed, the start time and the number of ticks applied (plus whatever clients did
through `stop` / `restore`), so two worlds built with the same arguments and advanced the same way are
equal field for field.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from smrweb.simulator.world.activity import ActivityMixin
from smrweb.simulator.world.artifacts import ArtifactsMixin
from smrweb.simulator.world.checkpoints import CheckpointsMixin
from smrweb.simulator.world.constants import (
    DEFAULT_METRICS,
    DEFAULT_PROJECT_ID,
    ORG_ID,
    parse_metrics,
    parse_shapes,
)
from smrweb.simulator.world.experiments import ExperimentsMixin
from smrweb.simulator.world.launches import LaunchesMixin
from smrweb.simulator.world.logs import LogsMixin
from smrweb.simulator.world.messages import MessagesMixin
from smrweb.simulator.world.projects import ProjectsMixin
from smrweb.simulator.world.runs import RunsMixin
from smrweb.simulator.world.state import SimRun
from smrweb.simulator.world.steering import SteeringMixin
from smrweb.simulator.world.truth import TruthMixin
from smrweb.simulator.world.usage import UsageMixin


class World(
    RunsMixin,
    ActivityMixin,
    UsageMixin,
    ExperimentsMixin,
    ArtifactsMixin,
    CheckpointsMixin,
    MessagesMixin,
    SteeringMixin,
    ProjectsMixin,
    TruthMixin,
    LaunchesMixin,
    LogsMixin,
):
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
        shared_experiment: bool = False,
    ):
        """`shapes`: the wire shapes of the free-form fields, one per run, drawn from the seed (with two
        or more, consecutive runs of a project alternate, so a project of >= 2 runs shows each).
        `unreadable_every=N`: every Nth inference entry of a run is served opaque (0: never).
        `metrics`: ((name, "lower_is_better" | "higher_is_better"), ...); run i scores on
        metrics[i % len(metrics)]. `worker_downgrades`: some runs (always index 5) have one worker
        whose resolved profile/model is cheaper than the requested one. `shared_experiment`: every
        attempt of a project's runs is a result of one experiment (created by the first run to score),
        as a long-lived benchmark is: past 500 results neither the experiment-results window nor the
        experiment's own results reach a run's older ones (issue 34)."""
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
        self.shared_experiment = bool(shared_experiment)
        self.shared_experiments: dict[str, dict[str, Any]] = {}  # project id -> its one experiment
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
        self.log_archives: dict[str, list[Any]] = {}  # run id -> its log archive entries (LogsMixin)
        self.log_files: list[str] = []  # artifact ids serving log archives' bytes
        for pid in self.project_ids:
            for index in range(runs):
                run = self._plan_run(pid, index, stagger_ticks)
                self.runs[run.run_id] = run
                self.runs_by_project[pid].append(run)
        self._moving: list[SimRun] = list(self.runs.values())  # not yet terminal or wedged, plan order
        self._apply_tick()  # tick 0: the first runs appear

    # ------------------------------------------------------------------ time
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
