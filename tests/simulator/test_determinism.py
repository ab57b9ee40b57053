"""Golden digests: a fixed seed gives the same world, byte for byte, release after release.

`test_world.py` checks that two worlds built alike are equal; these pin *what* they are equal to, so a
refactor of the simulator (or a new draw from a run's RNG) that changes any served value fails here.
If a change to the world is intended, update the digests in the same commit and say why.
"""

from __future__ import annotations

import hashlib
import json

import httpx
import pytest

from smrweb.simulator.server import start_simulator
from smrweb.simulator.world import World
from tests.simulator.conftest import API_KEY, MIXED, START
from tests.simulator.test_world import wire_dump

CONFIGS = {
    "default": {},
    "mixed": {**MIXED, "project_ids": ["p1", "p2"], "runs": 7},
}

# sha256 of the wire dump, the ground truth and the stop/restore answers (see `_world_digest`).
WORLD_DIGESTS = {
    "default": "c93a2fb13b632d39eeeab8421ff0b5fe45a03ada93814a5280919bc69e33b81a",
    "mixed": "9f037953f95ff5e8c9b8f6319b3e8008cfbed467f13dc8c86fbf665340aed60d",
}
# sha256 of every answer the HTTP API gives for the world (see `_http_digest`).
HTTP_DIGESTS = {
    "default": "79284da34627380042cb1b231ca1af6dc921f1067943e17e60ff7e6aafdaf931",
    "mixed": "465d75b00008807e1b5e20b6ae01cac3a5401ebb2c4b60ebf269b8144035c36e",
}


def _sha(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def _world_digest(**kwargs) -> str:
    """90 ticks, a client stop of each project's newest live run and a restore of its first
    run's first restorable checkpoint, 60 more ticks; then everything the world shows."""
    w = World(seed=13, start_time=START, **kwargs)
    w.tick(90)
    actions = []
    for pid in w.project_ids:
        first = w.runs_by_project[pid][0]
        newest = next(r for r in reversed(w.runs_by_project[pid]) if r.exists and not r.terminal)
        actions.append(w.stop(newest.run_id, pid))
        checkpoint = next(c for c in first.checkpoints if c["restorable"])
        actions.append(
            w.restore(first.run_id, pid, {"checkpoint_id": checkpoint["checkpoint_id"], "reason": "golden"})
        )
    w.tick(60)
    return _sha(json.dumps({"wire": wire_dump(w), "state": w.state(), "actions": actions}, sort_keys=True))


def _http_digest(**kwargs) -> str:
    """Every GET route for every project, run, experiment, checkpoint and artifact, then a stop and a
    restore over HTTP: status and body bytes, in a fixed order."""
    handle = start_simulator(
        seed=13, warmup=100, auto_tick=False, api_key=API_KEY, start_time=START, **kwargs
    )
    out = hashlib.sha256()
    try:
        with httpx.Client(base_url=handle.url, headers={"Authorization": f"Bearer {API_KEY}"}) as client:

            def get(path: str, **params):
                response = client.get(path, params=params)
                out.update(f"{path} {sorted(params.items())} {response.status_code}\n".encode())
                out.update(response.content)
                return response

            def post(path: str, body: dict):
                response = client.post(path, json=body)
                out.update(f"POST {path} {response.status_code}\n".encode())
                out.update(response.content)
                return response

            get("/smr/projects")
            for pid in handle.world.project_ids:
                p = f"/smr/projects/{pid}"
                runs = get(f"{p}/runs", limit=200).json()
                get(f"{p}/runs/active")
                get(f"{p}/runs", limit=2)
                get(f"{p}/runs", cursor=runs[1]["run_id"], limit=3)
                get(f"{p}/runs", state="done,failed")
                for run in runs:
                    r, pr = f"/smr/runs/{run['run_id']}", f"{p}/runs/{run['run_id']}"
                    get(pr)
                    for suffix in (
                        "",
                        "/usage",
                        "/spend",
                        "/cost_summary",
                        "/actors/usage",
                        "/artifacts/manifest",
                    ):
                        get(r + suffix)
                    get(f"{r}/runtime/messages", limit=1000)
                    get(f"{r}/runtime/messages", viewer_target="role:user", limit=5)
                    for checkpoint in get(f"{r}/checkpoints").json():
                        get(f"{pr}/checkpoints/{checkpoint['checkpoint_id']}")
                for experiment in get(f"{p}/experiments", limit=500).json():
                    eid = experiment["experiment_id"]
                    get(f"{p}/experiments/{eid}")
                    get(f"{p}/experiments/{eid}/results")
                    for artifact_id in experiment["linked_artifact_ids"]:
                        get(f"/smr/artifacts/{artifact_id}")
                        get(f"/smr/artifacts/{artifact_id}/content")
                get(f"{p}/experiment-results", limit=500)
                first, second, newest = runs[-1], runs[-2], runs[0]
                post(f"{p}/runs/{second['run_id']}/stop", {})  # terminal by now: 409
                post(f"/smr/runs/{newest['run_id']}/stop", {})
                checkpoint = next(
                    c for c in get(f"/smr/runs/{first['run_id']}/checkpoints").json() if c["restorable"]
                )
                post(f"{p}/runs/{first['run_id']}/restore", {"checkpoint_id": checkpoint["checkpoint_id"]})
            handle.world.tick(20)
            out.update(json.dumps(handle.world.state(), sort_keys=True).encode())
    finally:
        handle.stop()
    return out.hexdigest()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_world_digest_is_pinned(name):
    assert _world_digest(**CONFIGS[name]) == WORLD_DIGESTS[name]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_http_digest_is_pinned(name):
    assert _http_digest(**CONFIGS[name]) == HTTP_DIGESTS[name]
