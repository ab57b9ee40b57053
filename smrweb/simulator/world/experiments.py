"""Experiments and their results: each scored attempt of a run (an experiment with one result), the
run's best score so far, and what a new best sets off (a submission artifact, a checkpoint, a note).

The climb is computed as a loss; `_score` turns it into the run's metric in either direction.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from smrweb.simulator.world.constants import COHORT_KEY, METRIC, SUBMISSION_PATH
from smrweb.simulator.world.errors import NotFound
from smrweb.simulator.world.state import SimRun
from smrweb.simulator.world.wireformat import iso, stable_uuid


class ExperimentsMixin:
    """Attempts, experiments and results (the `*_wire` methods: call under `World.lock`)."""

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
        experiment_id = stable_uuid("experiment", run.run_id, n)
        result_id = stable_uuid("result", run.run_id, n)
        artifact_id = stable_uuid("artifact", run.run_id, n) if improved else None
        title = f"Attempt {n + 1}: lr={hparams['lr']:.2e}, wd={hparams['weight_decay']}"
        if self.shared_experiment:
            experiment_id = self._shared_experiment(run, now)["experiment_id"]
        else:
            run.experiments.append(
                {
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
                    "metrics_before": {
                        metric: self._score(run, best_before) if best_before is not None else baseline
                    },
                    "metrics_after": {metric: score},
                    "linked_artifact_ids": [artifact_id] if artifact_id else [],
                    "revision": 1,
                    "metadata": {"attempt_index": n, "hparams": hparams},
                    "created_at": iso(now),
                    "updated_at": iso(now),
                }
            )
        run.results.append(
            {
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
            }
        )
        run.updated_at = now
        if improved:
            run.best = value
            self._improvement(run, n, value, hparams, experiment_id, result_id, artifact_id, now)

    def _improvement(
        self,
        run: SimRun,
        n: int,
        value: float,
        hparams: dict[str, Any],
        experiment_id: str,
        result_id: str,
        artifact_id: str,
        now: datetime,
    ) -> None:
        """A new best: the submission is saved as an artifact, a checkpoint is captured, the user is told."""
        metric = run.metric
        value = self._score(run, value)  # the loss, as the run's metric
        baseline = self._score(run, run.baseline)
        self._save_submission(run, n, value, baseline, hparams, experiment_id, result_id, artifact_id, now)
        checkpoint_id = self._capture_checkpoint(run, value, experiment_id, artifact_id, now)
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

    def _shared_experiment(self, run: SimRun, now: datetime) -> dict[str, Any]:
        """The project's one experiment (`shared_experiment` worlds): made by the first run that scores,
        whose id it carries as `run_id`; every later attempt of every run is a result of it."""
        experiment = self.shared_experiments.get(run.project_id)
        if experiment is None:
            experiment = self.shared_experiments[run.project_id] = {
                "experiment_id": stable_uuid("experiment", run.project_id, "shared"),
                "org_id": self.org_id,
                "project_id": run.project_id,
                "run_id": run.run_id,
                "title": f"{run.metric} benchmark",
                "kind": "benchmark",
                "hypothesis": f"Each attempt's optimizer is scored on the same {run.metric} benchmark",
                "status": "running",
                "revision": 1,
                "metadata": {},
                "created_at": iso(now),
                "updated_at": iso(now),
            }
        experiment["updated_at"] = iso(now)
        return experiment

    # ------------------------------------------------------------------ wire shapes (call under lock)
    def experiments_wire(self, project_id: str, *, run_id: str | None, limit: int) -> list[dict[str, Any]]:
        rows = [
            e
            for r in self.runs_by_project[project_id]
            for e in r.experiments
            if run_id is None or r.run_id == run_id
        ]
        shared = self.shared_experiments.get(project_id)
        if shared is not None and (run_id is None or shared["run_id"] == run_id):
            rows.append(shared)
        rows.sort(key=lambda e: (e["created_at"], e["experiment_id"]), reverse=True)
        return [copy_row(e) for e in rows[:limit]]

    def experiment_wire(self, project_id: str, experiment_id: str) -> dict[str, Any]:
        for run in self.runs_by_project[project_id]:
            for e in run.experiments:
                if e["experiment_id"] == experiment_id:
                    return copy_row(e)
        shared = self.shared_experiments.get(project_id)
        if shared is not None and shared["experiment_id"] == experiment_id:
            return copy_row(shared)
        raise NotFound("Experiment not found")

    def results_wire(
        self,
        project_id: str,
        *,
        experiment_id: str | None,
        metric: str | None,
        comparison_cohort_key: str | None,
        truth_status: str | None,
        limit: int,
    ) -> list[dict]:
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
        return [copy_row(x) for x in rows[:limit]]

    def results_top_wire(
        self, project_id: str, *, metric: str, comparison_cohort_key: str | None, limit: int
    ) -> list[dict]:
        """`experiment-results/top?metric=`: the metric's results ranked best first (each in its own
        direction), with the experiment's title."""
        rows = [x for r in self.runs_by_project[project_id] for x in r.results if x["metric"] == metric]
        if comparison_cohort_key:
            rows = [x for x in rows if x["comparison_cohort_key"] == comparison_cohort_key]
        rows.sort(
            key=lambda x: (
                -x["value"] if x["metric_direction"] == "higher_is_better" else x["value"],
                x["created_at"],
                x["result_id"],
            )
        )
        titles = {
            e["experiment_id"]: e["title"] for r in self.runs_by_project[project_id] for e in r.experiments
        }
        if project_id in self.shared_experiments:
            shared = self.shared_experiments[project_id]
            titles[shared["experiment_id"]] = shared["title"]
        return [{**copy_row(x), "experiment_title": titles.get(x["experiment_id"], "")} for x in rows[:limit]]

    def run_results_wire(self, run: SimRun) -> dict[str, Any]:
        """`GET /smr/projects/{pid}/runs/{rid}/results`: the run's result summary, free-form in the spec
        ("outcome, artifacts grouped by type, debug log hint"). Shape "a" also states how many results
        the run holds and its best; shape "b" says nothing about results."""
        by_type: dict[str, list[dict[str, Any]]] = {}
        for a in run.artifacts:
            by_type.setdefault(a["artifact_type"], []).append(
                {"artifact_id": a["artifact_id"], "title": a["title"]}
            )
        outcome = run.state if run.terminal else None
        if run.shape == "b":
            return {"run_id": run.run_id, "outcome": outcome, "artifacts_by_type": by_type, "log_hint": None}
        best = None
        if run.results:
            sign = -1 if run.metric_direction == "higher_is_better" else 1
            best = copy_row(min(run.results, key=lambda x: (sign * x["value"], x["created_at"])))
        return {
            "run_id": run.run_id,
            "project_id": run.project_id,
            "outcome": outcome,
            "artifacts": by_type,
            "debug_log_hint": f"smr logs {run.run_id}",
            "results": {"count": len(run.results), "best": best},
        }


def copy_row(row: dict[str, Any]) -> dict[str, Any]:
    return {
        k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v) for k, v in row.items()
    }
