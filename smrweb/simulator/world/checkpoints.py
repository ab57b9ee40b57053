"""Checkpoints: the workspace captured at each improvement (some fail, and cannot be restored), and the
client's `restore` of one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from smrweb.simulator.world.errors import Conflict, NotFound
from smrweb.simulator.world.state import SimRun
from smrweb.simulator.world.wireformat import hex_digest, iso, stable_uuid


class CheckpointsMixin:
    """Checkpoint capture, `restore`, and `checkpoints_wire` (call under `World.lock`)."""

    def _capture_checkpoint(
        self, run: SimRun, value: float, experiment_id: str, artifact_id: str, now: datetime
    ) -> str:
        """A checkpoint of the workspace at an improvement; returns its id."""
        rng = run.rng
        metric = run.metric
        k = len(run.checkpoints)
        # Some checkpoints fail; the second one of each project's first run always does, so every
        # world shows one.
        failed = rng.random() < 0.2 or (run.index == 0 and k == 1)
        checkpoint_id = stable_uuid("checkpoint", run.run_id, k)
        commit = hex_digest("commit", run.run_id, k)[:40]
        workspace = f"/workspace/runs/{run.run_id}/checkpoints/{checkpoint_id}"
        # The run's previous checkpoint; a branched run's first continues the checkpoint it came from.
        parent = run.checkpoints[-1]["checkpoint_id"] if run.checkpoints else run.branched_from
        run.checkpoints.append(
            {
                "checkpoint_id": checkpoint_id,
                "artifact_id": stable_uuid("checkpoint-artifact", run.run_id, k),
                "artifact_type": "checkpoint",
                "run_id": run.run_id,
                "project_id": run.project_id,
                "captured_at": iso(now),
                "created_at": iso(now),
                "cadence_source": "per_milestone",
                "scope": "full",
                "parent_checkpoint_id": parent,
                "descriptor_digest": "sha256:" + hex_digest("descriptor", checkpoint_id),
                "size_bytes": None if failed else 1_000_000 + rng.randint(0, 4_000_000),
                "state": "failed" if failed else "ready",
                "uri": None
                if failed
                else f"s3://smr-simulator/{run.run_id}/checkpoints/{checkpoint_id}.tar.zst",
                "error_code": "workspace_missing" if failed else None,
                "restorable": not failed,
                "branchable": not failed,
                "metadata": {
                    "label": f"improvement {k + 1}: {metric}={value:.4f}",
                    "commit": commit,
                    "failure_reason": f"RuntimeError: workspace does not exist: {workspace}"
                    if failed
                    else None,
                    "failure_source": "checkpoint_capture" if failed else None,
                    "experiment_id": experiment_id,
                    "artifact_id": artifact_id,
                },
            }
        )
        return checkpoint_id

    # ------------------------------------------------------------------ client actions
    def restore(self, run_id: str, project_id: str | None, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            run = self.get_run(run_id, project_id)
            checkpoint_id = body.get("checkpoint_id") or body.get("checkpoint_record_id")
            checkpoint = next(
                (
                    c
                    for c in run.checkpoints
                    if c["checkpoint_id"] == checkpoint_id or c["artifact_id"] == checkpoint_id
                ),
                None,
            )
            if checkpoint is None and body.get("checkpoint_uri"):
                checkpoint = next((c for c in run.checkpoints if c["uri"] == body["checkpoint_uri"]), None)
            if checkpoint is None:
                raise NotFound("Checkpoint not found")
            if not checkpoint["restorable"]:
                raise Conflict(
                    {
                        "error_code": "checkpoint_not_restorable",
                        "message": f"Checkpoint {checkpoint['checkpoint_id']} is {checkpoint['state']}; "
                        "it cannot be restored.",
                        "retryable": False,
                        "current_state": checkpoint["state"],
                        "run_id": run.run_id,
                    }
                )
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

    def branch(self, run_id: str, project_id: str | None, body: dict[str, Any]) -> dict[str, Any]:
        """The SDK's `branch_run_from_checkpoint`: a new run of the project that starts from a branchable
        checkpoint of this one (its first checkpoint names it as its parent); `SmrRunBranchResponse`."""
        with self.lock:
            run = self.get_run(run_id, project_id)
            checkpoint_id = body.get("checkpoint_id") or body.get("checkpoint_record_id")
            checkpoint = next(
                (c for c in run.checkpoints if checkpoint_id in (c["checkpoint_id"], c["artifact_id"])), None
            )
            if checkpoint is None:
                raise NotFound("Checkpoint not found")
            if not checkpoint["branchable"]:
                raise Conflict(
                    {
                        "error_code": "checkpoint_not_branchable",
                        "message": f"Checkpoint {checkpoint['checkpoint_id']} is {checkpoint['state']}; "
                        "it cannot be branched from.",
                        "retryable": False,
                        "run_id": run.run_id,
                    }
                )
            now = self._stamp()
            key = f"branch:{checkpoint['checkpoint_id']}:{len(run.restores)}"
            child = self._plan_triggered(run.project_id, run.requested_profile, key)
            child.branched_from = checkpoint["checkpoint_id"]
            self._launch_state()[2][child.run_id] = None
            self._start_triggered(child, [])
            ack = {
                "accepted": True,
                "parent_run_id": run.run_id,
                "child_run_id": child.run_id,
                "source_checkpoint_id": checkpoint["checkpoint_id"],
                "created_at": iso(now),
            }
            run.restores.append({**ack, "mode": "branch", "reason": body.get("reason")})
            return ack

    # ------------------------------------------------------------------ wire shape (call under lock)
    def checkpoints_wire(self, run: SimRun) -> list[dict[str, Any]]:
        return [{**c, "metadata": dict(c["metadata"])} for c in run.checkpoints]
