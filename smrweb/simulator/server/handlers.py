"""The SMR route handlers, by noun: projects and runs, usage, artifacts, checkpoints, messages,
experiments and results, and the run actions (stop, restore, trigger). Each turns a `Ctx` into a `Response` by
asking the world; the HTTP layer calls them under `world.lock`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from smrweb.simulator.server.context import Ctx, HttpError, Response, query_error
from smrweb.simulator.world import Conflict, World, parse_iso
from smrweb.simulator.world.launches import Invalid

ACTIVE_RUNS_CAP = 200  # GET .../runs/active answers at most this many (newest first), with no cursor


# ---------------------------------------------------------------------- projects and runs
def _project(ctx: Ctx) -> str:
    pid = ctx.params["project_id"]
    if pid not in ctx.world.runs_by_project:
        raise HttpError(404, "Project not found")
    return pid


def _run(ctx: Ctx):
    pid = ctx.params.get("project_id")
    if pid is not None:
        _project(ctx)
    return ctx.world.get_run(ctx.params["run_id"], pid)


def h_projects(ctx: Ctx) -> Response:
    limit = ctx.q_int("limit", 100, 1, 500)
    return Response(payload=[ctx.world.project_wire(pid) for pid in ctx.world.project_ids][:limit])


def h_runs(ctx: Ctx, *, active_only: bool = False) -> Response:
    pid = _project(ctx)
    limit = ctx.q_int("limit", 50, 1, 200)
    states = {s.strip() for s in (ctx.q("state") or "").split(",") if s.strip()} or None
    after = None
    cursor = (ctx.q("cursor") or "").strip()
    if cursor and not active_only:
        after = _parse_cursor(ctx.world, pid, cursor)
    runs = ctx.world.list_runs(
        pid,
        states=None if active_only else states,
        active_only=active_only,
        created_after=None if active_only else ctx.q_datetime("created_after"),
        created_before=None if active_only else ctx.q_datetime("created_before"),
        after=after,
        limit=ACTIVE_RUNS_CAP if active_only else limit,
    )
    return Response(payload=[ctx.world.run_wire(r) for r in runs])


def _parse_cursor(world: World, pid: str, cursor: str) -> tuple[datetime, str]:
    """Accepted forms (as the spec says): '<created_at_iso>', '<created_at_iso>|<run_id>', '<run_id>'."""
    if "|" in cursor:
        ts, _, rid = cursor.partition("|")
        try:
            return parse_iso(ts), rid.strip()
        except ValueError:
            raise query_error("cursor", "value_error", "Invalid cursor", cursor) from None
    try:
        return parse_iso(cursor), ""  # runs created strictly before that time
    except ValueError:
        pass
    run = world.runs.get(cursor)
    if run is None or not run.exists or run.project_id != pid:
        raise query_error("cursor", "value_error", "Invalid cursor: unknown run id", cursor)
    return run.created_at, run.run_id


def h_run(ctx: Ctx) -> Response:
    return Response(payload=ctx.world.run_wire(_run(ctx)))


# ---------------------------------------------------------------------- usage
def h_usage(ctx: Ctx) -> Response:
    return Response(payload=ctx.world.usage_wire(_run(ctx)))


def h_cost_summary(ctx: Ctx) -> Response:
    return Response(payload=ctx.world.cost_summary_wire(_run(ctx)))


def h_actors_usage(ctx: Ctx) -> Response:
    return Response(payload=ctx.world.actor_usage_wire(_run(ctx)))


def h_poll_summary(ctx: Ctx) -> Response:
    limit = ctx.q_int("actor_limit", 25, 1, 200)
    return Response(payload=ctx.world.poll_summary_wire(_run(ctx), actor_limit=limit))


# ---------------------------------------------------------------------- artifacts
def h_manifest(ctx: Ctx) -> Response:
    return Response(payload=ctx.world.manifest_wire(_run(ctx)))


def h_artifact(ctx: Ctx) -> Response:
    return Response(payload=ctx.world.artifact_wire(ctx.params["artifact_id"]))


def h_artifact_content(ctx: Ctx) -> Response:
    disposition = ctx.q("disposition") or "inline"
    if disposition not in ("inline", "attachment"):
        raise query_error(
            "disposition",
            "string_pattern_mismatch",
            "String should match pattern '^(inline|attachment)$'",
            disposition,
        )
    _, artifact, content = ctx.world.artifact(ctx.params["artifact_id"])
    filename = artifact["path"].rsplit("/", 1)[-1]
    return Response(
        raw=content,
        content_type=artifact["content_type"],
        headers={
            "Content-Disposition": f'{disposition}; filename="{filename}"',
            "ETag": f'"{artifact["digest"].split(":", 1)[1]}"',
        },
    )


def h_log_archives(ctx: Ctx) -> Response:
    return Response(payload=ctx.world.log_archives_wire(_run(ctx)))


# ---------------------------------------------------------------------- checkpoints
def h_checkpoints(ctx: Ctx) -> Response:
    return Response(payload=ctx.world.checkpoints_wire(_run(ctx)))


def h_checkpoint(ctx: Ctx) -> Response:
    cid = ctx.params["checkpoint_id"]
    for checkpoint in ctx.world.checkpoints_wire(_run(ctx)):
        if cid in (checkpoint["checkpoint_id"], checkpoint["artifact_id"]):
            return Response(payload=checkpoint)
    raise HttpError(404, "Checkpoint not found")


# ---------------------------------------------------------------------- messages
def h_messages(ctx: Ctx) -> Response:
    run = _run(ctx)
    limit = ctx.q_int("limit", 200, 1, 1000)
    targets = [t for t in ctx.query.get("viewer_target", []) if t.strip()]
    return Response(
        payload=ctx.world.messages_wire(run, status=ctx.q("status"), viewer_targets=targets, limit=limit)
    )


# ---------------------------------------------------------------------- experiments and results
def h_experiments(ctx: Ctx) -> Response:
    pid = _project(ctx)
    limit = ctx.q_int("limit", 100, 1, 500)
    return Response(payload=ctx.world.experiments_wire(pid, run_id=ctx.q("run_id") or None, limit=limit))


def h_experiment(ctx: Ctx) -> Response:
    return Response(payload=ctx.world.experiment_wire(_project(ctx), ctx.params["experiment_id"]))


def h_experiment_results(ctx: Ctx) -> Response:
    pid = _project(ctx)
    limit = ctx.q_int("limit", 100, 1, 500)
    ctx.q_int("taskset_seed", 0, -(2**63), 2**63)  # validated like the real API, otherwise unused
    taskset = ctx.q("taskset_id")
    rows = ctx.world.results_wire(
        pid,
        experiment_id=ctx.q("experiment_id") or None,
        metric=ctx.q("metric") or None,
        comparison_cohort_key=ctx.q("comparison_cohort_key") or None,
        truth_status=ctx.q("truth_status") or None,
        limit=limit,
    )
    return Response(payload=[] if taskset else rows)  # no result of the simulator belongs to a task set


def h_experiment_results_top(ctx: Ctx) -> Response:
    """`GET /smr/projects/{pid}/experiment-results/top?metric=` (metric required: 422 without it)."""
    pid = _project(ctx)
    metric = ctx.q("metric")
    if not metric:
        raise HttpError(422, [{"loc": ["query", "metric"], "msg": "Field required", "type": "missing"}])
    limit = ctx.q_int("limit", 100, 1, 500)
    rows = ctx.world.results_top_wire(
        pid, metric=metric, comparison_cohort_key=ctx.q("comparison_cohort_key") or None, limit=limit
    )
    return Response(payload=[] if ctx.q("taskset_id") else rows)


def h_run_results(ctx: Ctx) -> Response:
    """`GET /smr/projects/{pid}/runs/{rid}/results`: the run's result summary (free-form)."""
    return Response(payload=ctx.world.run_results_wire(_run(ctx)))


def h_experiment_result_list(ctx: Ctx) -> Response:
    """`GET /smr/projects/{pid}/experiments/{eid}/results?limit=`: one experiment's results, newest first."""
    pid = _project(ctx)
    ctx.world.experiment_wire(pid, ctx.params["experiment_id"])  # 404 for an unknown experiment
    limit = ctx.q_int("limit", 100, 1, 500)
    return Response(
        payload=ctx.world.results_wire(
            pid,
            experiment_id=ctx.params["experiment_id"],
            metric=None,
            comparison_cohort_key=None,
            truth_status=None,
            limit=limit,
        )
    )


# ---------------------------------------------------------------------- run actions
def h_stop(ctx: Ctx) -> Response:
    if ctx.params.get("project_id") is not None:
        _project(ctx)
    try:
        return Response(payload=ctx.world.stop(ctx.params["run_id"], ctx.params.get("project_id")))
    except Conflict as exc:
        raise HttpError(409, exc.detail) from None


def h_restore(ctx: Ctx) -> Response:
    if ctx.params.get("project_id") is not None:
        _project(ctx)
    body = ctx.body if isinstance(ctx.body, dict) else {}
    mode = body.get("mode") or "in_place"
    if mode not in ("in_place", "branch"):
        raise HttpError(
            422,
            [
                {
                    "type": "literal_error",
                    "loc": ["body", "mode"],
                    "msg": "Input should be 'in_place' or 'branch'",
                    "input": mode,
                }
            ],
        )
    if not any(body.get(k) for k in ("checkpoint_id", "checkpoint_record_id", "checkpoint_uri")):
        raise HttpError(
            422,
            [
                {
                    "type": "value_error",
                    "loc": ["body"],
                    "input": body,
                    "msg": "Value error, one of checkpoint_id, checkpoint_record_id or "
                    "checkpoint_uri is required",
                }
            ],
        )
    try:
        return Response(payload=ctx.world.restore(ctx.params["run_id"], ctx.params.get("project_id"), body))
    except Conflict as exc:
        raise HttpError(409, exc.detail) from None


def h_branch(ctx: Ctx) -> Response:
    """`POST …/runs/{rid}/branches` (the SDK's `branch_run_from_checkpoint`): a new run from a checkpoint."""
    if ctx.params.get("project_id") is not None:
        _project(ctx)
    body = ctx.body if isinstance(ctx.body, dict) else {}
    if not any(body.get(k) for k in ("checkpoint_id", "checkpoint_record_id")):
        raise HttpError(
            422,
            [
                {
                    "type": "value_error",
                    "loc": ["body"],
                    "input": body,
                    "msg": "Value error, checkpoint_id is required",
                }
            ],
        )
    try:
        return Response(payload=ctx.world.branch(ctx.params["run_id"], ctx.params.get("project_id"), body))
    except Conflict as exc:
        raise HttpError(409, exc.detail) from None


def preview_run(ctx: Ctx) -> Any:
    """What a malformed answer to a POST is built from: the run as it is (the action is not applied)."""
    return ctx.world.run_wire(_run(ctx))


def h_trigger(ctx: Ctx) -> Response:
    """`POST /smr/projects/{pid}/trigger` (the SDK's `trigger_run`): the new run (or, for an idempotency
    key already used, the run it started), as `SmrRunResponse`."""
    pid = _project(ctx)
    if not isinstance(ctx.body, dict):
        raise HttpError(
            422,
            [
                {
                    "type": "model_type",
                    "loc": ["body"],
                    "msg": "Input should be a valid dictionary",
                    "input": ctx.body,
                }
            ],
        )
    try:
        wire, _ = ctx.world.trigger(pid, ctx.body)
    except Invalid as exc:
        raise HttpError(422, exc.errors) from None
    except Conflict as exc:
        raise HttpError(409, exc.detail) from None
    return Response(payload=wire)


def preview_trigger(ctx: Ctx) -> Any:
    """What a malformed answer to a trigger is built from: no run at all (a faulted request starts none,
    so a retry with the same key starts the one run)."""
    _project(ctx)
    return {"detail": "simulated: the trigger was not applied"}
