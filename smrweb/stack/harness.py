"""The demo harness: simulated agent runs that push live events through smrweb's REST API.

It talks to the server only over HTTP with project tokens, exactly as a team's harness would:
agent turns (driver inference and nested child work), metrics, scores with the artifact they
scored, checkpoints, kickoff messages and state changes. Some runs fail with a reason, one goes
silent (and is flagged stalled by the beat task), one runs on a downgraded model profile. Some have a
quirk the alerts look for: the driver repeats one tool call with the same arguments (`loops`) or
bounces between two (`ping-pong`), or the scores stop improving (`plateau`); the first runs of each
project have one each, so the demo's run.loop and run.no_progress alerts arrive within minutes.

    python -m smrweb.stack.harness --url http://127.0.0.1:8000 --token-file var/demo-tokens
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import httpx

from smrweb.stack import steering

PRESETS = Path(__file__).resolve().parent.parent / "tracking" / "fixtures" / "scenario_presets.json"


def preset(key: str) -> dict:
    """A shipped scenario preset as {key, fields}: the demo projects use the presets, and the harness
    reads them from the fixture (it talks to the server over HTTP only, never through Django)."""
    for entry in json.loads(PRESETS.read_text(encoding="utf-8")):
        if entry["fields"]["key"] == key:
            return {"key": key, "fields": entry["fields"]}
    raise KeyError(f"no scenario preset {key!r} in {PRESETS}")


DEMO_PROJECTS = [
    {
        "slug": "demo-dogfight",
        "name": "Dogfight arena (demo)",
        "stall_after": timedelta(seconds=45),
        "scenario": preset("onnx-arena-dogfight"),
        "metrics": ["train/loss", "eval/win_rate"],
        "regression_threshold": 40.0,  # Elo below the run's best: banner and one-click rollback
        "score": {"start": 1000.0, "step": 12.0, "noise": 18.0, "sign": 1},
    },
    {
        "slug": "demo-optimizer",
        "name": "Optimizer hill-climb (demo)",
        "stall_after": timedelta(seconds=45),
        "scenario": preset("optimizer-hill-climb"),
        "metrics": ["val_loss", "tokens_per_s"],
        "regression_threshold": 0.15,
        "score": {"start": 3.9, "step": -0.02, "noise": 0.03, "sign": -1},
    },
]


def generic_project(slug: str) -> dict:
    """How the harness runs a project that is not one of the demo's (the generic scenario: maximize
    `score`): an optimizer.py artifact and a score that climbs from 0.2."""
    return {
        "slug": slug,
        "name": slug,
        "metrics": ["val_loss"],
        "score": {"start": 0.2, "step": 0.02, "noise": 0.01, "sign": 1},
        "scenario": {
            "key": "generic",
            "fields": {
                "score_metric": "score",
                "artifact_path": "submission/optimizer.py",
                "artifact_kind": "python_source",
                "harness_id": "demo-harness",
            },
        },
    }


def optimizer_source(run_id: str, tick: int, rng: random.Random) -> str:
    """A submission/optimizer.py the scenario's validator accepts (a class `Optimizer` with `step`);
    about one in eight attempts forgets `step`, so verification has something to refuse."""
    step = (
        (
            "    def step(self, grads):\n        for p, g in zip(self.params, grads):\n"
            "            p -= self.lr * g\n"
        )
        if rng.random() > 0.125
        else "    pass  # forgot step()\n"
    )
    return (
        f'"""Optimizer for {run_id} at tick {tick}."""\n\nLR = {rng.uniform(1e-4, 3e-3):.5f}\n\n\n'
        f"class Optimizer:\n    def __init__(self, params, lr=LR):\n        self.params, self.lr = "
        f"list(params), lr\n\n"
        f"{step}"
    )


# What a demo policy gets wrong, and how often: most are fine; the rest break one rule each, so the
# dogfight project shows verified submissions and invalid ones with different reasons.
POLICY_FLAWS = {
    "": 0.8,
    "wide": 0.05,  # a hidden layer of 1,200 units: 273,603 parameters, over 250,000
    "wrong-shape": 0.05,  # declares four actions: float32[1,4]
    "nan": 0.05,  # a square root of the logits: NaN whenever one is negative
    "reshaped": 0.05,  # declares float32[1,3] but returns [3,1] (only running it shows it)
}


def onnx_policy(rng: random.Random, flaw: str | None = None) -> bytes:
    """A real ONNX policy for the Dogfight preset: float32[1,224] → MatMul, Add, Relu (16 to 48 hidden
    units) → MatMul, Add, Tanh → float32[1,3], under 12,000 parameters and 50 KB. `flaw` (by default
    drawn from POLICY_FLAWS) breaks one of the validator's rules."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    if flaw is None:
        flaw = rng.choices(list(POLICY_FLAWS), weights=list(POLICY_FLAWS.values()))[0]
    if flaw not in POLICY_FLAWS:
        raise ValueError(f"unknown policy flaw {flaw!r}")
    draw = np.random.default_rng(rng.getrandbits(64))
    hidden = 1200 if flaw == "wide" else rng.choice([16, 24, 32, 48])
    actions = 4 if flaw == "wrong-shape" else 3

    def tensor(name: str, *shape: int, scale: float):
        return numpy_helper.from_array((draw.standard_normal(shape) * scale).astype(np.float32), name)

    weights = [
        tensor("w1", 224, hidden, scale=224**-0.5),
        tensor("b1", hidden, scale=0.01),
        tensor("w2", hidden, actions, scale=hidden**-0.5),
        tensor("b2", actions, scale=0.01),
    ]
    nodes = [
        helper.make_node("MatMul", ["obs", "w1"], ["z1"]),
        helper.make_node("Add", ["z1", "b1"], ["a1"]),
        helper.make_node("Relu", ["a1"], ["h"]),
        helper.make_node("MatMul", ["h", "w2"], ["z2"]),
        helper.make_node("Add", ["z2", "b2"], ["logits"]),
    ]
    head = "logits"
    if flaw == "nan":
        nodes.append(helper.make_node("Sqrt", ["logits"], ["soft"]))
        head = "soft"
    nodes.append(helper.make_node("Tanh", [head], ["squashed" if flaw == "reshaped" else "action"]))
    if flaw == "reshaped":
        weights.append(numpy_helper.from_array(np.array([3, 1], dtype=np.int64), "column"))
        nodes.append(helper.make_node("Reshape", ["squashed", "column"], ["action"]))
    graph = helper.make_graph(
        nodes,
        "demo-policy",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, [1, 224])],
        [helper.make_tensor_value_info("action", TensorProto.FLOAT, [1, actions])],
        initializer=weights,
    )
    opsets = [helper.make_opsetid("", 17)]
    return helper.make_model(
        graph, opset_imports=opsets, producer_name="smrweb-demo-harness"
    ).SerializeToString()


MODELS = {"driver": "gpt-5.4-medium", "child": "gpt-5.4-mini"}
PRICE_PER_MTOK = {"gpt-5.4-medium": (1.25, 10.0), "gpt-5.4-mini": (0.25, 2.0)}  # $ per 1M tokens in, out
TOOLS = ["read_file", "apply_patch", "run_harness", "git_commit", "list_dir", "grep"]
FILES = [
    "train.py",
    "model.py",
    "optimizer.py",
    "data/loader.py",
    "configs/base.yaml",
    "eval.py",
    "README.md",
]
# Quirks (see the module's docstring), and how often a run gets one.
QUIRKS = {"": 6.0, "loops": 1.5, "ping-pong": 1.0, "plateau": 1.5}
FIRST_QUIRKS = ("loops", "plateau", "ping-pong")  # the first runs of each project, in this order
LOOP_TURNS = 5  # driver turns making the same call in a row (run.loop's default needs 3)
PING_PONG_TURNS = 8  # driver turns alternating between two calls: 4 cycles
LOOP_CALL = {"name": "run_harness", "arguments": {"episodes": 64, "seed": 7, "config": "configs/base.yaml"}}
PING_PONG_CALLS = (
    {"name": "apply_patch", "arguments": {"path": "train.py", "patch": "-lr = 3e-4\n+lr = 1e-3"}},
    {"name": "apply_patch", "arguments": {"path": "train.py", "patch": "-lr = 1e-3\n+lr = 3e-4"}},
)


@dataclass
class SimRun:
    project: dict
    token: str
    external_id: str
    fate: str  # "done", "failed", "stalls"
    length: int
    tick: int = 0
    score: float = 0.0
    best: float | None = None
    seq: itertools.count = field(default_factory=itertools.count)
    turn: int = 0
    child_turns: dict = field(default_factory=dict)
    quirk: str = ""  # "", "loops", "ping-pong", "plateau"
    quirk_at: int = 0  # the tick the quirk starts
    paused: bool = False  # smrweb paused it (stack/steering.py): no turns until resumed

    def looping_call(self) -> dict | None:
        """The tool call the driver makes this tick when it is looping, else None."""
        since = self.tick - self.quirk_at
        if self.quirk == "loops" and 0 <= since < LOOP_TURNS:
            return LOOP_CALL
        if self.quirk == "ping-pong" and 0 <= since < PING_PONG_TURNS:
            return PING_PONG_CALLS[since % 2]
        return None

    def event_id(self) -> str:
        return f"{self.external_id}:{next(self.seq)}"


class Harness:
    def __init__(self, base_url: str, tokens: dict[str, str], rng: random.Random, inbox: Path | None = None):
        self.client = httpx.Client(base_url=base_url, timeout=30)
        self.tokens = tokens
        self.rng = rng
        self.inbox = inbox  # where the webhook receiver leaves smrweb's steering (stack/steering.py)
        self.runs: list[SimRun] = []
        self.counter = itertools.count(1)
        self.lock = threading.Lock()  # the webhook receiver's threads add runs while `drive` steps them

    # -- HTTP with retries: the server is the source of truth, ids make retries safe ----------
    def send(self, run: SimRun, method: str, path: str, **kwargs) -> httpx.Response | None:
        url = f"/api/v1/projects/{run.project['slug']}/runs/{run.external_id}{path}"
        headers = {"Authorization": f"Bearer {run.token}"}
        for attempt in range(6):
            try:
                response = self.client.request(method, url, headers=headers, **kwargs)
            except httpx.HTTPError as exc:
                print(f"harness: {exc!r}; retrying", file=sys.stderr)
            else:
                if response.status_code < 500 and response.status_code != 429:
                    if response.status_code >= 400:
                        print(f"harness: {response.status_code} {response.text[:300]}", file=sys.stderr)
                    return response
            time.sleep(min(8, 0.5 * 2**attempt))
        return None

    def events(self, run: SimRun, events: list[dict]) -> None:
        for event in events:
            event.setdefault("id", run.event_id())
        self.send(run, "POST", "/events", json=events)

    # -- the simulation --------------------------------------------------------------------------
    def start_run(self, project: dict, quirk: str | None = None) -> SimRun:
        n = next(self.counter)
        fate = self.rng.choices(["done", "failed", "stalls"], weights=[6, 2, 1])[0]
        if quirk is None:
            quirk = self.rng.choices(list(QUIRKS), weights=list(QUIRKS.values()))[0]
        length = self.rng.randint(40, 90)
        if quirk == "plateau":  # long enough to be stuck for run.no_progress's 50 turns, and done at the end
            fate, length = "done", self.rng.randint(110, 150)
        run = SimRun(
            project,
            self.tokens[project["slug"]],
            f"run-{int(time.time()) % 100000:05d}-{n}",
            fate,
            length=length,
            score=project["score"]["start"],
            quirk=quirk,
            # Loops start early (before a failing run fails or a stalling one goes silent); a plateau after
            # a few scores.
            quirk_at=self.rng.randint(3, max(4, length // 5))
            if quirk != "plateau"
            else self.rng.randint(8, 16),
        )
        downgraded = self.rng.random() < 0.3
        self.send(
            run,
            "PATCH",
            "",
            json={
                "budget_usd": "2.50",
                "budget_tokens": 1_500_000,
                "requested_profile": "codex_gpt_5_4_medium",
                "actual_profile": "codex_gpt_5_4_mini_medium" if downgraded else "codex_gpt_5_4_medium",
                "git_branch": f"agent/{run.external_id}",
            },
        )
        self.events(
            run,
            [
                {"type": "state", "state": "queued"},
                {
                    "type": "message",
                    "topic": "smr.trigger.initial_runtime_message",
                    "target": "role:orchestrator",
                    "mode": "queue",
                    "body": f"Hill-climb {project['scenario']['fields']['score_metric']} on "
                    f"{project['scenario']['key']}. Carry forward: avoid the last 3 failed approaches.",
                },
                {"type": "state", "state": "running"},
            ],
        )
        self.runs.append(run)
        steering.open_inbox(self.inbox, project["slug"], run.external_id)
        return run

    def steer(self, run: SimRun) -> bool:
        """Act on what smrweb sent this run (paused, resumed, messages); False while it is paused."""
        slug = run.project["slug"]
        if steering.is_paused(self.inbox, slug, run.external_id):
            if not run.paused:
                run.paused = True
                self.events(run, [{"type": "state", "state": "paused"}])
            return False
        events = []
        if run.paused:
            run.paused = False
            events.append({"type": "state", "state": "running"})
        for message in steering.take_messages(self.inbox, slug, run.external_id):
            events += steering.reported(message)
        if events:
            self.events(run, events)
        return True

    def turn_event(self, run: SimRun, actor: str, parent: str | None, turn: int) -> dict:
        model = MODELS["driver"] if parent is None else MODELS["child"]
        tin, tout = self.rng.randint(2_000, 14_000), self.rng.randint(200, 2_500)
        pin, pout = PRICE_PER_MTOK[model]
        calls = [self.tool_call(name) for name in self.rng.sample(TOOLS, self.rng.randint(0, 3))]
        named = ", ".join(call["name"] for call in calls) or "no tool"
        return {
            "type": "agent.turn",
            "turn": turn,
            "actor": actor,
            "parent_actor": parent,
            "model": model,
            "kind": "driver_inference" if parent is None else "child_work",
            "tokens_in": tin,
            "tokens_out": tout,
            "cost_usd": round(tin * pin / 1e6 + tout * pout / 1e6, 6),
            "tool_calls": calls,
            "duration_ms": self.rng.randint(800, 20_000),
            # What a traced agent sends when it records message content (the demo projects capture it).
            "prompt": [
                {"role": "system", "content": f"You are {actor} of run {run.external_id}: raise the score."},
                {"role": "user", "content": f"Turn {turn}. Decide the next step from the last results."},
            ],
            "response": f"Next: {named}.",
        }

    def tool_call(self, name: str) -> dict:
        """A tool call with arguments, as agents make them: a healthy run seldom makes the same call
        twice in a row, so only the quirks trip the loop detection."""
        rng = self.rng
        arguments = {
            "read_file": lambda: {"path": rng.choice(FILES)},
            "apply_patch": lambda: {"path": rng.choice(FILES), "hunk": f"@@ -{rng.randint(1, 400)} @@"},
            "run_harness": lambda: {"episodes": rng.choice([16, 32, 64]), "seed": rng.randint(0, 9999)},
            "git_commit": lambda: {"message": f"step {rng.randint(1, 10**6)}"},
            "list_dir": lambda: {
                "path": rng.choice([".", "data", "configs", "tests"]),
                "depth": rng.randint(1, 4),
            },
            "grep": lambda: {"pattern": rng.choice(["lr", "warmup", "TODO", "def step", "loss"])},
        }[name]()
        return {"name": name, "arguments": arguments}

    def step(self, run: SimRun) -> bool:
        """Advance one tick; False when the run is over."""
        run.tick += 1
        if run.fate == "stalls" and run.tick > run.length // 3:
            steering.close_inbox(self.inbox, run.project["slug"], run.external_id)  # nobody answers now
            return True  # goes silent: the stalled-run task flags it
        cfg = run.project["score"]
        batch = [self.turn_event(run, "driver", None, run.turn)]
        if (call := run.looping_call()) is not None:
            batch[0]["tool_calls"] = [call]
        run.turn += 1
        for worker in range(self.rng.randint(0, 2)):
            actor = f"worker-{worker + 1}"
            n = run.child_turns.get(actor, 0)
            batch.append(self.turn_event(run, actor, "driver", n))
            run.child_turns[actor] = n + 1
        for key in run.project["metrics"]:
            base = cfg["start"] if key == run.project["metrics"][0] else 0.5
            value = (
                base * math.exp(-run.tick / 60) + self.rng.gauss(0, 0.01)
                if "loss" in key
                else min(1.0, 0.3 + run.tick / 200 + self.rng.gauss(0, 0.02))
            )
            batch.append({"type": "metric", "key": key, "step": run.tick, "value": round(value, 6)})
        if run.tick % 4 == 0:
            self.score(run, batch)
        if run.tick % 15 == 0:
            failed = self.rng.random() < 0.15
            batch.append(
                {
                    "type": "checkpoint",
                    "id": f"{run.external_id}-ckpt-{run.tick}",
                    "label": f"after turn {run.turn}",
                    "commit": hashlib.sha1(f"{run.external_id}{run.tick}".encode()).hexdigest()[:12],
                    "restorable": not failed,
                    "failure_reason": "RuntimeError: workspace snapshot timed out" if failed else "",
                }
            )
        if run.fate == "failed" and run.tick >= run.length // 2:
            batch.append(
                {
                    "type": "state",
                    "state": "failed",
                    "failure": {
                        "family": "runtime",
                        "source": "state_machine_runtime",
                        "detail": "repo_like_task_count_mismatch:requested=2:persisted=3 (nonretryable "
                        "intent rejection)",
                    },
                }
            )
            self.events(run, batch)
            return False
        if run.tick >= run.length:
            batch.append({"type": "state", "state": "done"})
            self.events(run, batch)
            return False
        self.events(run, batch)
        return True

    def score(self, run: SimRun, batch: list[dict]) -> None:
        cfg = run.project["score"]
        if run.quirk == "plateau" and run.tick >= run.quirk_at and run.best is not None:
            # Stuck: every score a little worse than the best (not by the regression threshold).
            run.score = run.best - cfg["sign"] * (
                abs(self.rng.gauss(0, cfg["noise"] / 4)) + cfg["noise"] / 10
            )
        else:
            run.score += cfg["step"] * self.rng.uniform(0.2, 1.6) + self.rng.gauss(0, cfg["noise"])
        run.score = max(0.05, run.score)
        if run.best is None or (run.score - run.best) * cfg["sign"] > 0:
            run.best = run.score
        fields = run.project["scenario"]["fields"]
        path = fields["artifact_path"]
        content = (
            onnx_policy(self.rng)
            if fields["artifact_kind"] == "onnx_model"
            else optimizer_source(run.external_id, run.tick, self.rng).encode()
        )
        self.send(
            run,
            "POST",
            "/artifacts",
            files={"file": (path.rsplit("/", 1)[-1], content)},
            data={
                "path": path,
                "sha256": hashlib.sha256(content).hexdigest(),
                "kind": run.project["scenario"]["fields"]["artifact_kind"],
            },
        )
        batch.append(
            {
                "type": "score",
                "score": round(run.score, 4),
                "harness_id": run.project["scenario"]["fields"]["harness_id"],
                "artifact": hashlib.sha256(content).hexdigest(),
                "commit": f"{run.tick:07x}",
                "details": {"tick": run.tick},
            }
        )

    def start_named_run(
        self, project: dict, run_id: str, *, kickoff: str, model_profile: str = "", budget: dict | None = None
    ) -> SimRun | None:
        """A run smrweb asked for (`smrweb.start`): the id it chose, its kickoff as the run's first
        runtime message, its model profile and budget; it hill-climbs and finishes. None when smrweb
        could not be told (its API did not answer): the webhook then answers 503 and smrweb retries."""
        run = SimRun(
            project,
            self.tokens[project["slug"]],
            run_id,
            "done",
            length=self.rng.randint(60, 90),
            score=project["score"]["start"],
        )
        settings = {"git_branch": f"agent/{run_id}"[:200]}
        if model_profile:
            settings["requested_profile"] = settings["actual_profile"] = model_profile
        if budget and budget.get("usd") is not None:
            settings["budget_usd"] = str(budget["usd"])
        if budget and budget.get("tokens") is not None:
            settings["budget_tokens"] = int(budget["tokens"])
        patched = self.send(run, "PATCH", "", json=settings)
        kickoff_event = {
            "id": f"{run_id}:kickoff",
            "type": "message",
            "topic": "smr.trigger.initial_runtime_message",
            "target": "role:orchestrator",
            "mode": "queue",
            "body": kickoff,
        }
        started = self.send(
            run,
            "POST",
            "/events",
            json=[
                {"id": f"{run_id}:queued", "type": "state", "state": "queued"},
                kickoff_event,
                {"id": f"{run_id}:running", "type": "state", "state": "running"},
            ],
        )
        if patched is None or started is None or started.status_code >= 400:
            return None
        with self.lock:
            self.runs.append(run)
        steering.open_inbox(self.inbox, project["slug"], run_id)  # it can be steered like the others
        return run

    def drive(self, interval: float, stop: threading.Event | None = None) -> None:
        """Step the runs smrweb started until each ends, acting on their steering (the demo's webhook
        receiver runs this in a thread; it starts no runs of its own), or until `stop` is set."""
        stop = stop or threading.Event()
        while not stop.is_set():
            with self.lock:
                running = list(self.runs)
            for run in running:
                if not self.steer(run):
                    continue  # paused: no turns
                if not self.step(run):
                    steering.close_inbox(self.inbox, run.project["slug"], run.external_id)
                    with self.lock:
                        self.runs.remove(run)
            stop.wait(interval)

    def loop(self, interval: float, concurrent: int) -> None:
        steering.reset_inbox(self.inbox)
        for project in DEMO_PROJECTS:
            for i in range(concurrent):
                self.start_run(project, FIRST_QUIRKS[i] if i < len(FIRST_QUIRKS) else None)
        while True:
            for run in list(self.runs):
                if not self.steer(run):
                    continue  # paused: no turns
                if not self.step(run):
                    steering.close_inbox(self.inbox, run.project["slug"], run.external_id)
                    self.runs.remove(run)
                    self.start_run(run.project)
                elif run.fate == "stalls" and run.tick > run.length:
                    self.runs.remove(run)  # leave it stalled for good, start a fresh one
                    self.start_run(run.project)
            time.sleep(interval)


def answer_start(harness: Harness, payload: dict) -> tuple[int, str]:
    """The harness's answer to a signed `smrweb.start` (already verified): start the run smrweb named,
    with the kickoff it sent. (status, text) for the webhook's answer: 200 started, 400 not a start this
    harness can run, 503 when smrweb could not be told (smrweb retries with the same key)."""
    slug = payload.get("project")
    if not isinstance(slug, str) or slug not in harness.tokens:
        return 400, f"no token for project {slug!r} here"
    project = next((p for p in DEMO_PROJECTS if p["slug"] == slug), None) or generic_project(slug)
    run_id, kickoff = payload.get("run_id"), payload.get("kickoff")
    if not isinstance(run_id, str) or not run_id or not isinstance(kickoff, str):
        return 400, "a start names a run_id and a kickoff"
    with harness.lock:
        if any(r.external_id == run_id and r.project["slug"] == slug for r in harness.runs):
            return 200, f"run {run_id} is already running"
    budget = payload.get("budget") if isinstance(payload.get("budget"), dict) else None
    run = harness.start_named_run(
        project, run_id, kickoff=kickoff, model_profile=str(payload.get("model_profile") or ""), budget=budget
    )
    if run is None:
        return 503, f"could not report run {run_id} to smrweb; retry"
    return 200, f"started run {run_id}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--token-file", required=True, help="lines of '<project-slug> <token>'")
    parser.add_argument("--interval", type=float, default=1.5, help="seconds between ticks")
    parser.add_argument("--runs", type=int, default=3, help="concurrent runs per project")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    tokens = dict(line.split() for line in open(args.token_file) if line.strip())
    try:
        inbox = steering.inbox_dir(args.token_file)
        Harness(args.url, tokens, random.Random(args.seed), inbox).loop(args.interval, args.runs)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
