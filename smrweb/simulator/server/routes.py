"""The route table: every SMR path the simulator answers (the spec's templates), the handler of each,
and the name fault scopes match against."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from smrweb.simulator.server.context import Ctx, Response
from smrweb.simulator.server.handlers import (
    h_actors_usage,
    h_artifact,
    h_artifact_content,
    h_branch,
    h_checkpoint,
    h_checkpoints,
    h_cost_summary,
    h_experiment,
    h_experiment_result_list,
    h_experiment_results,
    h_experiment_results_top,
    h_experiments,
    h_log_archives,
    h_manifest,
    h_messages,
    h_poll_summary,
    h_projects,
    h_restore,
    h_run,
    h_run_results,
    h_runs,
    h_stop,
    h_trigger,
    h_usage,
    preview_run,
    preview_trigger,
)
from smrweb.simulator.server.steering import h_enqueue_message, h_pause, h_resume

P = "/smr/projects/{project_id}"
R = "/smr/runs/{run_id}"
PR = P + "/runs/{run_id}"


@dataclass(frozen=True)
class Route:
    method: str
    template: str  # the spec's path template
    name: str  # what fault scopes match against
    handler: Callable[[Ctx], Response]
    preview: Callable[[Ctx], Any] | None = None  # for POST routes: the body a malformed answer corrupts

    @property
    def regex(self) -> re.Pattern:
        pattern = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(self.template))
        return re.compile(f"^{pattern}$")

    @property
    def key(self) -> str:
        return f"{self.method} {self.template}"


ROUTES: tuple[Route, ...] = (
    Route("GET", "/smr/projects", "projects", h_projects),
    Route("GET", P + "/runs", "runs", h_runs),
    Route("GET", P + "/runs/active", "runs_active", lambda c: h_runs(c, active_only=True)),
    Route("GET", PR, "run", h_run),
    Route("GET", R, "run", h_run),
    Route("GET", R + "/usage", "usage", h_usage),
    Route("GET", R + "/spend", "usage", h_usage),
    Route("GET", R + "/cost_summary", "cost_summary", h_cost_summary),
    Route("GET", PR + "/actors/usage", "actors_usage", h_actors_usage),
    Route("GET", R + "/actors/usage", "actors_usage", h_actors_usage),
    Route("GET", PR + "/poll-summary", "poll_summary", h_poll_summary),
    Route("GET", PR + "/artifacts/manifest", "manifest", h_manifest),
    Route("GET", PR + "/logs/archives", "log_archives", h_log_archives),
    Route("GET", R + "/artifacts/manifest", "manifest", h_manifest),
    Route("GET", "/smr/artifacts/{artifact_id}", "artifact", h_artifact),
    Route("GET", "/smr/artifacts/{artifact_id}/content", "artifact_content", h_artifact_content),
    Route("GET", PR + "/checkpoints", "checkpoints", h_checkpoints),
    Route("GET", R + "/checkpoints", "checkpoints", h_checkpoints),
    Route("GET", PR + "/checkpoints/{checkpoint_id}", "checkpoint", h_checkpoint),
    Route("GET", R + "/checkpoints/{checkpoint_id}", "checkpoint", h_checkpoint),
    Route("GET", PR + "/runtime/messages", "messages", h_messages),
    Route("GET", R + "/runtime/messages", "messages", h_messages),
    Route("GET", P + "/experiments", "experiments", h_experiments),
    Route("GET", P + "/experiments/{experiment_id}", "experiment", h_experiment),
    Route("GET", P + "/experiment-results/top", "experiment_results_top", h_experiment_results_top),
    Route("GET", P + "/experiment-results", "experiment_results", h_experiment_results),
    Route("GET", PR + "/results", "run_results", h_run_results),
    Route(
        "GET", P + "/experiments/{experiment_id}/results", "experiment_result_list", h_experiment_result_list
    ),
    Route("POST", PR + "/stop", "stop", h_stop, preview_run),
    Route("POST", R + "/stop", "stop", h_stop, preview_run),
    Route("POST", PR + "/restore", "restore", h_restore, preview_run),
    Route("POST", R + "/restore", "restore", h_restore, preview_run),
    Route("POST", PR + "/branches", "branch", h_branch, preview_run),
    Route("POST", R + "/branches", "branch", h_branch, preview_run),
    Route("POST", P + "/trigger", "trigger", h_trigger, preview_trigger),
    Route("POST", R + "/runtime/messages", "enqueue_message", h_enqueue_message),
    Route("POST", PR + "/pause", "pause", h_pause, preview_run),
    Route("POST", R + "/pause", "pause", h_pause, preview_run),
    Route("POST", PR + "/resume", "resume", h_resume, preview_run),
    Route("POST", R + "/resume", "resume", h_resume, preview_run),
)
_COMPILED = [(route, route.regex) for route in ROUTES]


def match_route(method: str, path: str) -> tuple[Route | None, dict[str, str], bool]:
    """(route, path params, whether the path exists for some other method)."""
    other = False
    for route, regex in _COMPILED:
        m = regex.match(path)
        if m:
            if route.method == method:
                return route, m.groupdict(), False
            other = True
    return None, {}, other
