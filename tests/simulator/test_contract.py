"""The real `managed-research` SDK against the simulator, and every answer against the SDK's OpenAPI spec.

Each SDK call the connector makes must parse; each raw answer must validate against the spec's
response schema for that operation; the validator must be able to fail; faults must surface through
the SDK as the documented exception types and leave the world untouched.
"""

from __future__ import annotations

import base64
import hashlib
import threading

import httpx
import jsonschema
import pytest
from managed_research import ManagedResearchClient
from managed_research.errors import SmrApiError, SmrLimitExceededError, SmrStructuredDenialError
from managed_research.models.run_control import ManagedResearchRunControlError
from managed_research.models.run_observability import RunLifecycleView
from managed_research.models.run_state import RunState

from smrweb.simulator.faults import FaultConfig, FaultInjector
from smrweb.simulator.server import ROUTES
from smrweb.simulator.world import KICKOFF_TOPIC, ORCH_DOWNGRADED_PROFILE, ORCH_PROFILE, pico_to_cents
from tests.simulator.conftest import API_KEY, component_schema, make_sim, operation_schema, validate
from tests.simulator.shapes import METER, PARTICIPANT_ROLE, decode_actor_tokens, decode_entry, decode_totals

P = "/smr/projects/{project_id}"
PR = P + "/runs/{run_id}"


def truth_runs(handle) -> list[dict]:
    return handle.world.state()["projects"][handle.project_id]["runs"]


def run_of_fate(handle, fate: str) -> dict:
    return next(r for r in truth_runs(handle) if r["fate"] == fate)


def run_with_artifacts(handle) -> dict:
    return next(r for r in truth_runs(handle) if r["artifacts"] and r["fate"] == "climb")


# ---------------------------------------------------------------------- the spec itself
def test_every_served_route_is_an_operation_of_the_spec(spec):
    for route in ROUTES:
        operation = spec["paths"].get(route.template, {}).get(route.method.lower())
        assert operation is not None, f"{route.key} is not in the spec"
        if route.name != "artifact_content":
            assert operation_schema(spec, route.method, route.template) is not None, route.key


@pytest.mark.parametrize(
    ("schema_name", "good", "break_it"),
    [
        (
            "SmrRunLifecycleResponse",
            {
                "authority_phase": "running",
                "terminal_phase": "none",
                "dispatch": {"owner": "o", "pool_id": "p", "host_kind": "docker"},
            },
            lambda d: d.pop("dispatch"),
        ),
        (
            "SmrActorUsageSummaryResponse",
            {"actor_id": "a", "org_id": "o", "project_id": "p", "run_id": "r", "participant_role": "worker"},
            lambda d: d.update(actor_role="worker"),
        ),  # additionalProperties: false
        (
            "SmrWorkerRuntimeMessageResponse",
            {
                "message_id": "m",
                "created_at": "2026-03-01T12:00:00.000001Z",
                "seq": 1,
                "run_id": "r",
                "mode": "queue",
                "sender": "user",
                "status": "consumed",
            },
            lambda d: d.update(seq="1"),
        ),
        (
            "SmrExperimentResultResponse",
            {
                "result_id": "x",
                "org_id": "o",
                "project_id": "p",
                "experiment_id": "e",
                "metric": "val_loss",
                "metric_direction": "lower_is_better",
                "value": 1.5,
                "comparison_cohort_key": "c",
                "truth_status": "observed",
                "created_at": "2026-03-01T12:00:00Z",
            },
            lambda d: d.update(created_at="yesterday"),
        ),  # date-time format is checked
        (
            "SmrRunCheckpointStatusResponse",
            {
                "artifact_id": "a",
                "run_id": "r",
                "project_id": "p",
                "state": "ready",
                "artifact_type": "checkpoint",
                "metadata": {},
                "created_at": "2026-03-01T12:00:00Z",
            },
            lambda d: d.pop("artifact_id"),
        ),
    ],
)
def test_the_validator_accepts_good_and_rejects_broken_answers(spec, schema_name, good, break_it):
    schema = component_schema(spec, schema_name)
    validate(schema, good)
    broken = dict(good)
    break_it(broken)
    with pytest.raises(jsonschema.ValidationError):
        validate(schema, broken)


def test_a_broken_simulator_answer_fails_the_operation_schema(sim, raw, check):
    run = truth_runs(sim)[0]
    answer = raw(sim, "GET", f"/smr/projects/{sim.project_id}/runs/{run['run_id']}").json()
    check("GET", PR, answer)
    for breaking in ("lifecycle", "status_detail", "org_id"):
        broken = {k: v for k, v in answer.items() if k != breaking}
        with pytest.raises(jsonschema.ValidationError):
            check("GET", PR, broken)
    with pytest.raises(jsonschema.ValidationError):
        check("GET", PR, {**answer, "host_kind": "kubernetes"})
    listing = raw(sim, "GET", f"/smr/projects/{sim.project_id}/runs").json()
    with pytest.raises(jsonschema.ValidationError):
        check("GET", P + "/runs", {"items": listing})


def test_every_get_route_answers_as_the_spec_says(sim, raw, check):
    """Each GET route the simulator serves, for every run, against its operation's 200 schema."""
    pid = sim.project_id
    for truth in truth_runs(sim):
        ids = {"project_id": pid, "run_id": truth["run_id"]}
        if truth["checkpoints"]:
            ids["checkpoint_id"] = truth["checkpoints"][-1]["checkpoint_id"]
        if truth["artifacts"]:
            ids["artifact_id"] = truth["artifacts"][-1]["artifact_id"]
        if truth["scores"]:
            ids["experiment_id"] = truth["scores"][-1]["experiment_id"]
        for route in ROUTES:
            if route.method != "GET" or route.name == "artifact_content":
                continue
            try:
                path = route.template.format(**ids)
            except KeyError:
                continue  # this run has no checkpoint / artifact / experiment yet
            if route.name == "experiment_results_top":  # its metric is required (422 without)
                path += f"?metric={truth.get('metric') or 'val_loss'}"
            response = raw(sim, "GET", path)
            assert response.status_code == 200, (path, response.text)
            check("GET", route.template, response.json())


# ---------------------------------------------------------------------- every call, parsed and validated
def test_runs_list_and_pagination(sim, client_for, raw, check):
    client = client_for(sim)
    pid = sim.project_id
    runs = client.runs.list(pid)
    assert {r["run_id"] for r in runs} == {r["run_id"] for r in truth_runs(sim)}
    check("GET", P + "/runs", raw(sim, "GET", f"/smr/projects/{pid}/runs", limit=50).json())
    keys = [(r["created_at"], r["run_id"]) for r in runs]
    assert keys == sorted(keys, reverse=True)  # newest first

    for cursor_of in (
        lambda r: f"{r['created_at']}|{r['run_id']}",
        lambda r: r["run_id"],
        lambda r: r["created_at"],
    ):
        pages, cursor = [], None
        while True:
            page = client.runs.list(pid, limit=2, cursor=cursor)
            if not page:
                break
            pages.extend(page)
            cursor = cursor_of(page[-1])
        assert [r["run_id"] for r in pages] == [r["run_id"] for r in runs]

    running = client.runs.list(pid, state="running,queued")
    assert running and all(r["state"] in ("running", "queued") for r in running)
    active = client.runs.list_active(pid)
    check("GET", P + "/runs/active", raw(sim, "GET", f"/smr/projects/{pid}/runs/active").json())
    assert {r["run_id"] for r in active} == {
        r["run_id"] for r in runs if r["state"] not in ("done", "failed", "stopped", "canceled")
    }
    projects = client.projects.list()
    assert [p.project_id for p in projects] == [pid]
    check("GET", "/smr/projects", raw(sim, "GET", "/smr/projects").json())


def test_runs_get_each_run(sim, client_for, raw, check):
    client = client_for(sim)
    pid = sim.project_id
    for truth in truth_runs(sim):
        run = client.runs.get(truth["run_id"], project_id=pid)
        answer = raw(sim, "GET", f"/smr/projects/{pid}/runs/{truth['run_id']}").json()
        check("GET", PR, answer)
        check("GET", "/smr/runs/{run_id}", raw(sim, "GET", f"/smr/runs/{truth['run_id']}").json())
        assert run.state == RunState(truth["state"])
        lifecycle = RunLifecycleView.from_wire(run.raw["lifecycle"])
        assert lifecycle.dispatch.host_kind == "docker"
        assert run.roles is not None  # the roles object also parses as the SDK's typed role bindings
        orchestrator = run.raw["roles"]["orchestrator"]
        assert orchestrator["requested_profile_id"] == truth["requested_profile_id"] == ORCH_PROFILE
        assert orchestrator["resolved_profile_id"] == truth["resolved_profile_id"]
        assert run.raw["limit"]["budget_usd"] == 5.0 and run.limit.max_spend_usd == 5.0
        if truth["fate"] == "fail":
            assert run.terminal_outcome.value == "failed"
            assert lifecycle.failure.family == "runtime"
            assert lifecycle.failure.detail == "repo_like_task_count_mismatch:requested=2:persisted=3"
            assert run.raw["lifecycle"]["failure"]["source"] == "orchestrator"
        if truth["fate"] == "downgrade":
            assert orchestrator["resolved_profile_id"] == ORCH_DOWNGRADED_PROFILE
        if truth["fate"] == "wedge":
            assert run.state is RunState.RUNNING and run.raw["finished_at"] is None
        workers = run.raw["roles"].get("workers")
        if sim.world.worker_downgrades:  # per worker actor: requested vs resolved
            assert [
                (w["actor_id"], w["requested_profile_id"], w["resolved_profile_id"], w["model"])
                for w in workers
            ] == [
                (a["actor_id"], a["requested_profile_id"], a["resolved_profile_id"], a["actual_model"])
                for a in truth["actors"][1:]
            ]
        else:
            assert workers is None


def test_usage_cost_summary_and_actor_usage_agree(sim, client_for, raw, check):
    client = client_for(sim)
    pid = sim.project_id
    for truth in truth_runs(sim):
        rid = truth["run_id"]
        usage = client.runs.get_usage(rid)
        check("GET", "/smr/runs/{run_id}/usage", raw(sim, "GET", f"/smr/runs/{rid}/usage").json())
        check("GET", "/smr/runs/{run_id}/spend", raw(sim, "GET", f"/smr/runs/{rid}/spend").json())
        readable = [d for d in map(decode_entry, usage.entries) if d is not None]
        unreadable = truth["unreadable"]
        assert len(usage.entries) - len(readable) == unreadable["entries"]
        total = sum(d["pico"] for d in readable) + unreadable["pico_usd"]
        assert total == truth["usage"]["total_pico_usd"]
        assert usage.cost.total_cents == pico_to_cents(total)
        assert usage.cost.total_pico_usd == (total if truth["shape"] == "a" else 0)  # b sends no pico
        totals = decode_totals(usage.totals)
        assert totals["input_tokens"] == sum(d["input_tokens"] for d in readable) + unreadable["input_tokens"]
        assert (
            totals["output_tokens"] == sum(d["output_tokens"] for d in readable) + unreadable["output_tokens"]
        )
        assert totals["entries"] == len(usage.entries)

        summary = client.runs.cost_summary(rid)
        check(
            "GET", "/smr/runs/{run_id}/cost_summary", raw(sim, "GET", f"/smr/runs/{rid}/cost_summary").json()
        )
        assert summary.total_cents == pico_to_cents(total) and summary.recording_status == "complete"
        if truth["shape"] == "a":
            assert summary.total_pico_usd == total
            assert sum(m.billed_amount_pico_usd for m in summary.by_meter) == total
            assert {m.meter_kind for m in summary.by_meter} <= {"inference", "sandbox_seconds"}
        else:
            assert summary.total_pico_usd == 0 and all(
                m.billed_amount_pico_usd == 0 for m in summary.by_meter
            )
            assert {m.meter_kind for m in summary.by_meter} <= {"inference_tokens", "sandbox_time"}
        assert {METER[m.meter_kind]: m.billed_amount_cents for m in summary.by_meter} == {
            kind: m["cents"] for kind, m in truth["usage"]["by_meter"].items()
        }

        actors = client.runs.get_actor_usage(rid, project_id=pid)
        check(
            "GET",
            PR + "/actors/usage",
            raw(sim, "GET", f"/smr/projects/{pid}/runs/{rid}/actors/usage").json(),
        )
        check(
            "GET", "/smr/runs/{run_id}/actors/usage", raw(sim, "GET", f"/smr/runs/{rid}/actors/usage").json()
        )
        assert actors.count == len(actors.actors)
        assert sum(a.event_count for a in actors.actors) == len(usage.entries)
        assert sum(decode_actor_tokens(a.token_usage)[0] for a in actors.actors) == totals["input_tokens"]
        roles = {PARTICIPANT_ROLE[a.participant_role] for a in actors.actors}
        assert roles <= {"orchestrator", "worker"}
        if usage.entries:
            assert "orchestrator" in roles
        actual = {a["actor_id"]: a["actual_model"] for a in truth["actors"]}
        for row in actors.actors:
            assert set(row.by_model) <= {actual[row.actor_id]}


def test_artifact_manifest_and_content(sim, client_for, raw, check, tmp_path):
    client = client_for(sim)
    pid = sim.project_id
    truth = run_with_artifacts(sim)
    rid = truth["run_id"]
    manifest = client.runs.artifact_manifest(rid, project_id=pid)
    check(
        "GET",
        PR + "/artifacts/manifest",
        raw(sim, "GET", f"/smr/projects/{pid}/runs/{rid}/artifacts/manifest").json(),
    )
    check(
        "GET",
        "/smr/runs/{run_id}/artifacts/manifest",
        raw(sim, "GET", f"/smr/runs/{rid}/artifacts/manifest").json(),
    )
    assert manifest.artifact_count == len(manifest.artifacts) == len(truth["artifacts"])
    assert manifest.output_files == [] and manifest.result_json is None
    first = manifest.artifacts[0]
    assert (first.artifact_type, first.path, first.content_type) == (
        "submission",
        "submission/optimizer.py",
        "text/x-python",
    )
    assert set(first.metadata) >= {"experiment_id", "score"}
    check(
        "GET", "/smr/artifacts/{artifact_id}", raw(sim, "GET", f"/smr/artifacts/{first.artifact_id}").json()
    )
    assert client.get_artifact(first.artifact_id).digest == first.digest

    before = sim.stats.snapshot()["content_requests"].get(first.artifact_id, 0)
    content = client.get_artifact_content(first.artifact_id)
    assert content["encoding"] == "utf-8" and content["content_type"] == "text/x-python"
    data = (
        content["content"].encode()
        if content["encoding"] == "utf-8"
        else base64.b64decode(content["content"])
    )
    assert "sha256:" + hashlib.sha256(data).hexdigest() == first.digest
    assert len(data) == first.size_bytes == content["content_bytes"]
    written = client.download_artifact(first.artifact_id, tmp_path / "optimizer.py")  # disposition=attachment
    assert "sha256:" + hashlib.sha256((tmp_path / "optimizer.py").read_bytes()).hexdigest() == first.digest
    assert written["bytes_written"] == first.size_bytes
    stats = sim.stats.snapshot()
    assert stats["content_requests"][first.artifact_id] == before + 2
    assert stats["content_served"][first.artifact_id] >= 2
    response = raw(sim, "GET", f"/smr/artifacts/{first.artifact_id}/content", disposition="attachment")
    assert response.headers["content-disposition"].startswith("attachment")
    assert (
        raw(sim, "GET", f"/smr/artifacts/{first.artifact_id}/content", disposition="evil").status_code == 422
    )


def test_checkpoints(sim, client_for, raw, check):
    client = client_for(sim)
    pid = sim.project_id
    seen_failed = False
    for truth in truth_runs(sim):
        rid = truth["run_id"]
        checkpoints = client.runs.list_checkpoints(rid, project_id=pid)
        check(
            "GET", PR + "/checkpoints", raw(sim, "GET", f"/smr/projects/{pid}/runs/{rid}/checkpoints").json()
        )
        check("GET", "/smr/runs/{run_id}/checkpoints", raw(sim, "GET", f"/smr/runs/{rid}/checkpoints").json())
        assert [c.checkpoint_id for c in checkpoints] == [c["checkpoint_id"] for c in truth["checkpoints"]]
        for checkpoint in checkpoints:
            assert checkpoint.state in ("ready", "failed")
            assert set(checkpoint.metadata) >= {"label", "commit", "failure_reason", "failure_source"}
            if checkpoint.state == "failed":
                seen_failed = True
                assert checkpoint.metadata["failure_reason"].startswith(
                    "RuntimeError: workspace does not exist:"
                )
                assert not checkpoint.restorable
            else:
                assert checkpoint.restorable and checkpoint.metadata["failure_reason"] is None
        if checkpoints:
            one = client.runs.checkpoint(rid, checkpoints[0].checkpoint_id, project_id=pid)
            assert one.checkpoint_id == checkpoints[0].checkpoint_id
            check(
                "GET",
                PR + "/checkpoints/{checkpoint_id}",
                raw(sim, "GET", f"/smr/projects/{pid}/runs/{rid}/checkpoints/{one.checkpoint_id}").json(),
            )
    assert seen_failed


def test_runtime_messages_scoped_and_unscoped(sim, client_for, raw, check):
    client = client_for(sim)
    pid = sim.project_id
    for truth in truth_runs(sim):
        rid = truth["run_id"]
        scoped = client.list_project_run_runtime_messages(pid, rid, limit=1000)
        unscoped = client.runs.list_runtime_messages(rid, limit=1000)
        check(
            "GET",
            PR + "/runtime/messages",
            raw(sim, "GET", f"/smr/projects/{pid}/runs/{rid}/runtime/messages", limit=1000).json(),
        )
        check(
            "GET",
            "/smr/runs/{run_id}/runtime/messages",
            raw(sim, "GET", f"/smr/runs/{rid}/runtime/messages").json(),
        )
        assert scoped == unscoped
        assert len(scoped) == truth["messages"]["count"]
        kickoff = scoped[0]
        assert (kickoff["seq"], kickoff["payload"]["topic"], kickoff["target"], kickoff["mode"]) == (
            1,
            KICKOFF_TOPIC,
            "role:orchestrator",
            "queue",
        )
        assert [m["seq"] for m in scoped] == list(range(1, len(scoped) + 1))
        tail = client.list_project_run_runtime_messages(pid, rid, limit=2)
        assert tail == scoped[-2:]  # limit keeps the newest, in seq order


def test_experiments_and_results(sim, client_for, raw, check):
    client = client_for(sim)
    pid = sim.project_id
    truth = run_with_artifacts(sim)
    rid = truth["run_id"]
    experiments = client.projects.list_experiments(pid, run_id=rid, limit=500)
    check("GET", P + "/experiments", raw(sim, "GET", f"/smr/projects/{pid}/experiments", run_id=rid).json())
    assert {e["experiment_id"] for e in experiments} == {s["experiment_id"] for s in truth["scores"]}
    one = client.projects.get_experiment(pid, experiments[0]["experiment_id"])
    check(
        "GET",
        P + "/experiments/{experiment_id}",
        raw(sim, "GET", f"/smr/projects/{pid}/experiments/{one['experiment_id']}").json(),
    )

    params = {"metric": truth["metric"], "limit": 500}
    results = client._request_json("GET", f"/smr/projects/{pid}/experiment-results", params=params)
    check("GET", P + "/experiment-results", results)
    mine = sorted((r for r in results if r["run_id"] == rid), key=lambda r: r["created_at"])
    assert [r["value"] for r in mine] == [s["value"] for s in truth["scores"]]
    assert all(
        r["metric_direction"] == truth["metric_direction"] and r["truth_status"] == "observed" for r in mine
    )
    first = mine[0]
    assert first["delta"] == pytest.approx(first["value"] - first["baseline_value"])
    by_experiment = client._request_json(
        "GET", f"/smr/projects/{pid}/experiment-results", params={"experiment_id": first["experiment_id"]}
    )
    assert [r["result_id"] for r in by_experiment] == [first["result_id"]]
    artifact_experiments = {a["experiment_id"] for a in truth["artifacts"]}
    assert artifact_experiments <= {r["experiment_id"] for r in mine if r["metadata"]["improvement"]}


def test_stop_then_409_on_a_terminal_run(fresh_sim, client_for, raw, check, spec):
    client = client_for(fresh_sim)
    pid = fresh_sim.project_id
    wedged = run_of_fate(fresh_sim, "wedge")
    assert wedged["state"] == "running"
    ack = client.runs.stop(wedged["run_id"], project_id=pid)
    assert ack.run.state is RunState.STOPPED and ack.enqueue_status.value == "accepted"
    assert ack.control_intent_id and ack.control_intent_ack_at is not None
    assert run_of_fate(fresh_sim, "wedge")["state"] == "stopped"

    with pytest.raises(ManagedResearchRunControlError) as refused:
        client.runs.stop(wedged["run_id"], project_id=pid)
    assert refused.value.error_code.value == "terminal_run"
    assert refused.value.current_state == "stopped" and refused.value.retryable is False

    # raw answers: a 200 that is a full run (and the compact receipt too), and the 409 detail shape
    running = next(r for r in truth_runs(fresh_sim) if r["state"] in ("running", "queued"))
    answer = raw(fresh_sim, "POST", f"/smr/projects/{pid}/runs/{running['run_id']}/stop")
    assert answer.status_code == 200
    check("POST", PR + "/stop", answer.json())
    validate(component_schema(spec, "SmrRunResponse"), answer.json())
    validate(component_schema(spec, "SmrRunControlReceiptResponse"), answer.json())
    conflict = raw(fresh_sim, "POST", f"/smr/runs/{running['run_id']}/stop")
    assert conflict.status_code == 409
    assert set(conflict.json()["detail"]) == {"error_code", "message", "retryable", "current_state", "run_id"}


def test_restore_a_checkpoint(fresh_sim, client_for, raw, check):
    client = client_for(fresh_sim)
    pid = fresh_sim.project_id
    truth = run_with_artifacts(fresh_sim)
    ready = next(c for c in truth["checkpoints"] if c["state"] == "ready")
    ack = client.runs.restore_checkpoint(
        truth["run_id"],
        project_id=pid,
        checkpoint_id=ready["checkpoint_id"],
        mode="in_place",
        reason="roll back to a good state",
    )
    assert ack["accepted"] is True and ack["action"] == "restore" and ack["state"] == "accepted"
    assert ack["checkpoint_id"] == ready["checkpoint_id"] and ack["mode"] == "in_place"
    check("POST", PR + "/restore", ack)
    recorded = next(r for r in truth_runs(fresh_sim) if r["run_id"] == truth["run_id"])["restores"]
    assert [(r["checkpoint_id"], r["reason"]) for r in recorded] == [
        (ready["checkpoint_id"], "roll back to a good state")
    ]
    failed = [c for r in truth_runs(fresh_sim) for c in r["checkpoints"] if c["state"] == "failed"]
    if failed:
        owner = next(r for r in truth_runs(fresh_sim) if failed[0] in r["checkpoints"])
        with pytest.raises(SmrStructuredDenialError) as refused:
            client.runs.restore_checkpoint(
                owner["run_id"], project_id=pid, checkpoint_id=failed[0]["checkpoint_id"]
            )
        assert refused.value.status_code == 409
    assert (
        raw(
            fresh_sim,
            "POST",
            f"/smr/runs/{truth['run_id']}/restore",
            json={"mode": "sideways", "checkpoint_id": "x"},
        ).status_code
        == 422
    )


# ---------------------------------------------------------------------- errors
def test_trigger_starts_one_run_per_key_with_the_kickoff_and_limit_asked_for(
    fresh_sim, client_for, raw, check, spec
):
    client = client_for(fresh_sim)
    pid = fresh_sim.project_id
    before = {r["run_id"] for r in truth_runs(fresh_sim)}
    answer = client.trigger_run(
        pid,
        runbook_preset="lite",
        agent_profile=ORCH_PROFILE,
        limit={"max_spend_usd": 1.25, "max_tokens": 50_000},
        initial_runtime_messages=[{"mode": "queue", "body": "Carry-forward: try a smaller step."}],
        idempotency_key="contract-key-1",
    )
    check("POST", P + "/trigger", answer)
    [body] = [call["body"] for call in fresh_sim.world.trigger_log]
    validate(component_schema(spec, "SmrProjectTriggerRequest"), body)  # what the SDK sent is the spec's
    assert answer["state"] == "queued" and answer["project_id"] == pid
    assert answer["limit"] == {"max_spend_usd": 1.25, "max_tokens": 50_000, "budget_usd": 1.25}
    assert answer["roles"]["orchestrator"]["requested_profile_id"] == ORCH_PROFILE
    again = client.trigger_run(pid, runbook_preset="lite", idempotency_key="contract-key-1")
    assert again["run_id"] == answer["run_id"]
    new = [r for r in truth_runs(fresh_sim) if r["run_id"] not in before]
    assert [r["run_id"] for r in new] == [answer["run_id"]] and new[0]["fate"] == "climb"
    [kickoff] = client.list_project_run_runtime_messages(pid, answer["run_id"])
    assert (kickoff["seq"], kickoff["body"], kickoff["topic"]) == (
        1,
        "Carry-forward: try a smaller step.",
        KICKOFF_TOPIC,
    )
    # It lives like any run: queued, then running with turns and scored attempts.
    fresh_sim.world.tick(20)
    run = client.runs.get(answer["run_id"], project_id=pid)
    assert run.state is RunState.RUNNING
    assert client.projects.list_experiments(pid, run_id=answer["run_id"])
    for bad in (
        {"agent_profile": "no_such_profile"},
        {"limit": {"max_spend_usd": -1}},
        {"limit": {"budget": 3}},
        {"initial_runtime_messages": [{"body": "x", "mode": "shout"}]},
        {"prompt": "the legacy field"},
    ):
        refused = raw(
            fresh_sim, "POST", f"/smr/projects/{pid}/trigger", json={"runbook_preset": "lite", **bad}
        )
        assert refused.status_code == 422, bad
        validate(component_schema(spec, "HTTPValidationError"), refused.json())
    assert raw(fresh_sim, "POST", "/smr/projects/nope/trigger", json={}).status_code == 404


def test_wrong_or_missing_api_key_is_refused(sim, client_for):
    with pytest.raises(SmrApiError) as refused:
        client_for(sim, api_key="not-the-key").runs.list(sim.project_id)
    assert refused.value.status_code == 401
    response = httpx.get(f"{sim.url}/smr/projects/{sim.project_id}/runs")
    assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
    assert httpx.get(f"{sim.url}/_sim/health").status_code == 200  # the control API needs no key


def test_unknown_ids_and_bad_parameters(sim, client_for, raw, spec):
    client = client_for(sim)
    with pytest.raises(SmrApiError) as missing:
        client.runs.get("no-such-run", project_id=sim.project_id)  # scoped 404, then the unscoped fallback
    assert missing.value.status_code == 404
    assert raw(sim, "GET", "/smr/projects/other/runs").status_code == 404
    assert raw(sim, "GET", "/smr/nothing/here").status_code == 404
    bad = raw(sim, "GET", f"/smr/projects/{sim.project_id}/runs", limit=0)
    assert bad.status_code == 422
    validate(component_schema(spec, "HTTPValidationError"), bad.json())
    assert raw(sim, "GET", f"/smr/projects/{sim.project_id}/runs", limit="many").status_code == 422
    assert raw(sim, "GET", f"/smr/projects/{sim.project_id}/runs", cursor="no-such-run").status_code == 422


# ---------------------------------------------------------------------- faults through the SDK
def _calls(handle):
    pid = handle.project_id
    truth = run_with_artifacts(handle)
    rid = truth["run_id"]
    aid = truth["artifacts"][0]["artifact_id"]
    wedged = run_of_fate(handle, "wedge")["run_id"]
    return {
        "runs.list": lambda c: c.runs.list(pid),
        "runs.get": lambda c: c.runs.get(rid, project_id=pid),
        "runs.get_usage": lambda c: c.runs.get_usage(rid),
        "runs.cost_summary": lambda c: c.runs.cost_summary(rid),
        "runs.get_actor_usage": lambda c: c.runs.get_actor_usage(rid, project_id=pid),
        "runs.artifact_manifest": lambda c: c.runs.artifact_manifest(rid, project_id=pid),
        "get_artifact_content": lambda c: c.get_artifact_content(aid),
        "runs.list_checkpoints": lambda c: c.runs.list_checkpoints(rid, project_id=pid),
        "runtime_messages": lambda c: c.list_project_run_runtime_messages(pid, rid),
        "projects.list_experiments": lambda c: c.projects.list_experiments(pid, run_id=rid),
        "experiment_results": lambda c: c._request_json(
            "GET", f"/smr/projects/{pid}/experiment-results", params={"metric": "val_loss"}
        ),
        "runs.stop": lambda c: c.runs.stop(wedged, project_id=pid),
        "runs.restore_checkpoint": lambda c: c.runs.restore_checkpoint(
            rid,
            project_id=pid,
            checkpoint_id=next(x["checkpoint_id"] for x in truth["checkpoints"] if x["state"] == "ready"),
        ),
        "trigger_run": lambda c: c.trigger_run(
            pid,
            runbook_preset="lite",
            initial_runtime_messages=[{"body": "go"}],
            idempotency_key="fault-key-1",
        ),
    }


TYPED_DICT = {
    "runs.get",
    "runs.get_usage",
    "runs.cost_summary",
    "runs.get_actor_usage",
    "runs.artifact_manifest",
    "runs.stop",
}
LISTS = {"runs.list", "runs.list_checkpoints", "runtime_messages", "projects.list_experiments"}
RAW = {"runs.restore_checkpoint", "experiment_results", "trigger_run"}  # handed back unlooked-at by the SDK
CONTENT = {"get_artifact_content"}


def expected(kind: str, call: str):
    """What the SDK does with each fault, per call (docs/simulator.md has the same table).
    None: no exception (the answer must be checked by the caller)."""
    if kind == "429":
        return SmrStructuredDenialError  # error_code rate_limited is not one the SDK knows by name
    if kind in ("5xx", "drop"):
        return httpx.RemoteProtocolError if (kind == "drop" and call in CONTENT) else SmrApiError
    if kind == "truncated":
        return None if call in CONTENT else SmrApiError  # content: short bytes, caught by the digest
    if kind in ("wrong_shape", "denial"):
        if call in TYPED_DICT:
            return ValueError
        if call in LISTS:
            return SmrApiError
        return None  # RAW and CONTENT: handed back as they are
    if kind == "limit":
        return SmrLimitExceededError
    raise AssertionError(kind)


FAULT_KINDS = ("429", "5xx", "truncated", "wrong_shape", "denial", "limit", "drop")


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_each_fault_raises_the_expected_sdk_error_and_changes_nothing(kind, client_for):
    handle = make_sim()
    try:
        client = client_for(handle)
        calls = _calls(handle)
        wedged = run_of_fate(handle, "wedge")["run_id"]
        before = handle.world.state()
        spec = "denial=1.0,denial_status=429" if kind == "limit" else f"{kind}=1.0"
        handle.set_faults(spec)
        for name, call in calls.items():
            exc_type = expected(kind, name)
            if exc_type is None:
                answer = call(client)
                if name in CONTENT:
                    digest = run_with_artifacts(handle)["artifacts"][0]["digest"]
                    assert "sha256:" + hashlib.sha256(answer["content"].encode()).hexdigest() != digest
                else:
                    assert "accepted" not in answer  # not the data: a denial or a wrapped body
            else:
                with pytest.raises(exc_type):
                    call(client)
        assert handle.world.state() == before  # no fault had a side effect
        assert run_of_fate(handle, "wedge")["state"] == "running"
        stats = handle.stats.snapshot()
        fault_key = "denial" if kind == "limit" else kind
        assert stats["faults"][fault_key] >= len(calls)
        assert stats["content_served"] == {}

        handle.set_faults("")
        client.runs.stop(wedged, project_id=handle.project_id)  # and without faults it works again
        assert run_of_fate(handle, "wedge")["state"] == "stopped"
    finally:
        handle.stop()


def test_429_carries_retry_after_in_header_and_body(fresh_sim, raw, client_for):
    fresh_sim.set_faults("429=1.0,retry_after=7")
    response = raw(fresh_sim, "GET", f"/smr/projects/{fresh_sim.project_id}/runs")
    assert response.status_code == 429 and response.headers["retry-after"] == "7"
    assert response.json()["detail"] == {
        "error_code": "rate_limited",
        "message": "Too many requests (simulated)",
        "retry_after_seconds": 7,
        "retryable": True,
    }
    with pytest.raises(SmrStructuredDenialError) as limited:
        client_for(fresh_sim).runs.list(fresh_sim.project_id)
    assert limited.value.status_code == 429 and limited.value.detail["retry_after_seconds"] == 7


def test_denial_with_a_success_status(fresh_sim, raw):
    fresh_sim.set_faults("denial=1.0")
    response = raw(fresh_sim, "GET", f"/smr/runs/{truth_runs(fresh_sim)[0]['run_id']}/usage")
    assert response.status_code == 200
    assert response.json()["detail"]["error_code"] == "smr_limit_exceeded"


def test_slow_answers_time_the_sdk_out_without_side_effects(fresh_sim, client_for):
    client = client_for(fresh_sim, timeout_seconds=0.3)
    calls = _calls(fresh_sim)
    before = fresh_sim.world.state()
    fresh_sim.set_faults("slow=1.0,slow_seconds=2")
    with pytest.raises(SmrApiError, match="timed out"):
        calls["runs.get_usage"](client)
    with pytest.raises(SmrApiError, match="timed out"):
        calls["runs.stop"](client)
    with pytest.raises(httpx.ReadTimeout):  # the SDK does not wrap transport errors on artifact content
        calls["get_artifact_content"](client)
    fresh_sim.set_faults("slow=1.0,slow_seconds=0.05")  # a short delay: the answer still arrives
    assert client.runs.get_usage(run_with_artifacts(fresh_sim)["run_id"]).cost.total_pico_usd > 0
    assert fresh_sim.world.state() == before


def test_scoped_faults_hit_only_matching_routes(fresh_sim, client_for):
    client = client_for(fresh_sim)
    calls = _calls(fresh_sim)
    fresh_sim.set_faults("usage:5xx=1.0,/smr/artifacts/*/content:drop=1.0")
    with pytest.raises(SmrApiError) as failed:
        calls["runs.get_usage"](client)
    assert failed.value.status_code in (500, 502, 503)
    with pytest.raises(httpx.RemoteProtocolError):
        calls["get_artifact_content"](client)
    calls["runs.get_actor_usage"](client)  # `usage` does not match `actors_usage`
    calls["runs.list"](client)
    assert set(fresh_sim.stats.snapshot()["faults"]) == {"5xx", "drop"}


def test_fault_config_parsing_and_seeded_decisions():
    config = FaultConfig.parse(
        "429=0.1, 5xx=0.05,slow=0.05,malformed=0.05,denial=0.05,drop=0.02,"
        "usage:5xx=0.3,slow_seconds=1.5,retry_after=3"
    )
    assert config.rates == {
        "429": 0.1,
        "5xx": 0.05,
        "slow": 0.05,
        "malformed": 0.05,
        "denial": 0.05,
        "drop": 0.02,
    }
    assert config.rates_for("usage", "/smr/runs/x/usage")["5xx"] == 0.3
    assert config.rates_for("runs", "/smr/projects/p/runs")["5xx"] == 0.05
    assert (config.slow_seconds, config.retry_after) == (1.5, 3)
    assert FaultConfig.parse(config.spec()).to_dict() == config.to_dict()
    for bad in ("teapot=0.1", "429=2", "429", "429=0.6,5xx=0.6"):
        with pytest.raises(ValueError):
            FaultConfig.parse(bad)

    def sequence(seed):
        injector = FaultInjector("429=0.2,5xx=0.2,malformed=0.2", seed=seed)
        return [injector.decide("runs", "/smr/projects/p/runs")[0] for _ in range(200)]

    assert sequence(1) == sequence(1) != sequence(2)
    kinds = set(sequence(1))
    assert kinds == {None, "429", "5xx", "truncated", "wrong_shape"}


def test_control_api(fresh_sim):
    url = fresh_sim.url
    ticks = httpx.get(f"{url}/_sim/state").json()["ticks"]
    assert httpx.post(f"{url}/_sim/tick", params={"n": 3}).json()["ticks"] == ticks + 3
    assert httpx.post(f"{url}/_sim/freeze").json()["frozen"] is True
    frozen = httpx.post(f"{url}/_sim/tick", params={"n": 3})
    assert frozen.status_code == 409 and frozen.json()["applied"] == 0
    assert httpx.post(f"{url}/_sim/faults", json={"spec": "429=0.5"}).json()["rates"] == {"429": 0.5}
    assert httpx.get(f"{url}/_sim/faults").json()["rates"] == {"429": 0.5}
    assert httpx.post(f"{url}/_sim/faults", json={"spec": "bogus=1"}).status_code == 400
    httpx.post(f"{url}/_sim/faults", json={"spec": ""})
    httpx.get(
        f"{url}/smr/projects/{fresh_sim.project_id}/runs", headers={"Authorization": f"Bearer {API_KEY}"}
    )
    stats = httpx.get(f"{url}/_sim/stats").json()
    assert stats["requests"] == {"GET /smr/projects/{project_id}/runs": 1}
    assert httpx.post(f"{url}/_sim/stats/reset").json()["total_requests"] == 0


def test_concurrent_clients_while_the_world_ticks_see_consistent_answers():
    handle = make_sim(auto_tick=True, tick=0.01, warmup=5)
    errors: list[BaseException] = []
    try:

        def worker():
            try:
                with ManagedResearchClient(api_key=API_KEY, backend_base=handle.url) as client:
                    for _ in range(8):
                        for run in client.runs.list(handle.project_id):
                            usage = client.runs.get_usage(run["run_id"])
                            assert usage.cost.total_pico_usd == sum(e["cost_pico_usd"] for e in usage.entries)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=20)
        assert not errors, errors[0]
        assert handle.world.ticks > 5
    finally:
        handle.stop()


def test_a_stopped_simulator_refuses_connections_and_serves_the_same_world_again(client_for):
    from smrweb.simulator.server import start_simulator

    handle = make_sim()
    port, world = handle.port, handle.world
    before = world.state()
    handle.stop()
    with pytest.raises(SmrApiError, match="network error"):
        client_for(handle).runs.list(handle.project_id)  # connection refused
    again = start_simulator(world=world, port=port, api_key=API_KEY, auto_tick=False)
    try:
        assert again.url == handle.url
        assert {r["run_id"] for r in client_for(again).runs.list(again.project_id)} == {
            r["run_id"] for r in before["projects"][again.project_id]["runs"]
        }
        assert world.state() == before
    finally:
        again.stop()
