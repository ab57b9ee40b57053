"""Artifacts: the submission each improvement saves (its bytes are a small importable optimizer module,
`render_optimizer`), the run's artifact manifest and the artifact lookups.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from smrweb.simulator.world.constants import METRIC, SUBMISSION_CONTENT_TYPE, SUBMISSION_PATH
from smrweb.simulator.world.errors import NotFound
from smrweb.simulator.world.state import SimRun
from smrweb.simulator.world.wireformat import iso


class ArtifactsMixin:
    """Submission artifacts, by run and by id (the `*_wire` methods: call under `World.lock`)."""

    def _save_submission(
        self,
        run: SimRun,
        n: int,
        value: float,
        baseline: float,
        hparams: dict[str, Any],
        experiment_id: str,
        result_id: str,
        artifact_id: str,
        now: datetime,
    ) -> None:
        """The improved optimizer as a submission artifact (its bytes are served by `artifact`)."""
        metric = run.metric
        content = render_optimizer(run.run_id, n, value, baseline, hparams, metric=metric).encode()
        artifact = self._artifact_record(
            run,
            artifact_id,
            content,
            artifact_type="submission",
            title=f"optimizer.py ({metric} {value:.4f})",
            path=SUBMISSION_PATH,
            content_type=SUBMISSION_CONTENT_TYPE,
            created_at=now,
            metadata={
                "experiment_id": experiment_id,
                "result_id": result_id,
                "score": value,
                "metric": metric,
                "attempt_index": n,
            },
        )
        run.artifacts.append(artifact)

    def _artifact_record(
        self,
        run: SimRun,
        artifact_id: str,
        content: bytes,
        *,
        artifact_type: str,
        title: str,
        path: str,
        content_type: str,
        created_at: datetime,
        metadata: dict[str, Any] | None = None,
        size_bytes: int | None = None,
    ) -> dict[str, Any]:
        """An artifact as the backend records it, its bytes served by `artifact` (`size_bytes`: what its
        listing says, when not the bytes' own length: a backend that understates it)."""
        artifact = {
            "artifact_id": artifact_id,
            "project_id": run.project_id,
            "run_id": run.run_id,
            "artifact_type": artifact_type,
            "title": title,
            "uri": f"s3://smr-simulator/{run.run_id}/{artifact_id}/{path.rsplit('/', 1)[-1]}",
            "digest": "sha256:" + hashlib.sha256(content).hexdigest(),
            "path": path,
            "size_bytes": len(content) if size_bytes is None else size_bytes,
            "content_type": content_type,
            "content_url": f"/smr/artifacts/{artifact_id}/content",
            "created_at": iso(created_at),
            "metadata": metadata or {},
        }
        self.artifacts[artifact_id] = (run, artifact, content)
        return artifact

    def add_run_artifact(
        self, run_id: str, path: str, content: bytes, *, size_bytes: int | None = None
    ) -> dict[str, Any]:
        """A file in the run's manifest besides its submissions (a test's: a large checkpoint, or one whose
        listing understates its size)."""
        with self.lock:
            run = self.get_run(run_id)
            artifact = self._artifact_record(
                run,
                f"file-{run_id}-{len(self.artifacts) + 1}",
                content,
                artifact_type="output_file",
                title=path.rsplit("/", 1)[-1],
                path=path,
                content_type="application/octet-stream",
                created_at=self.tick_time(),
                size_bytes=size_bytes,
            )
            run.artifacts.append(artifact)
            return _copy_artifact(artifact)

    # ------------------------------------------------------------------ wire shapes (call under lock)
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
            "metadata": {
                **artifact["metadata"],
                "path": artifact["path"],
                "size_bytes": artifact["size_bytes"],
                "content_type": artifact["content_type"],
            },
            "created_at": artifact["created_at"],
        }

    def artifact(self, artifact_id: str) -> tuple[SimRun, dict[str, Any], bytes]:
        found = self.artifacts.get(artifact_id)
        if found is None:
            raise NotFound("Artifact not found")
        return found


def _copy_artifact(a: dict[str, Any]) -> dict[str, Any]:
    return {**a, "metadata": dict(a["metadata"])}


def render_optimizer(
    run_id: str, attempt: int, value: float, baseline: float, hp: dict[str, Any], metric: str = METRIC
) -> str:
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
