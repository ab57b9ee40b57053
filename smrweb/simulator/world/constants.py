"""The world's fixed vocabulary: profiles and models, prices, metrics, fates, wire shapes, topics; and the
parsing of the `World` options drawn from it (`parse_shapes`, `parse_metrics`).

The wire shapes (the `*_wire` methods of the mixins) follow the SMR OpenAPI spec shipped in the
`managed-research` wheel; docs/simulator.md says which loose fields carry what.
"""

from __future__ import annotations

ORG_ID = "org_simulated"
DEFAULT_PROJECT_ID = "sim-project"

# Profiles and the model each resolves to.
ORCH_PROFILE = "codex_gpt_5_4_medium"
ORCH_DOWNGRADED_PROFILE = "codex_gpt_5_4_mini_medium"
WORKER_PROFILE = "codex_gpt_5_4_mini_low"
WORKER_DOWNGRADED_PROFILE = "codex_gpt_5_4_nano_low"
PROFILE_MODEL = {
    ORCH_PROFILE: "gpt-5.4",
    ORCH_DOWNGRADED_PROFILE: "gpt-5.4-mini",
    WORKER_PROFILE: "gpt-5.4-mini",
    WORKER_DOWNGRADED_PROFILE: "gpt-5.4-nano",
}
# (input, output) price in pico-USD per token.
MODEL_PRICE = {
    "gpt-5.4": (1_250_000, 10_000_000),
    "gpt-5.4-mini": (250_000, 2_000_000),
    "gpt-5.4-nano": (50_000, 400_000),
}
SANDBOX_PICO_PER_SECOND = 50_000_000  # $0.18 per sandbox hour

METRIC = "val_loss"
METRIC_DIRECTION = "lower_is_better"
DEFAULT_METRICS = ((METRIC, METRIC_DIRECTION),)
METRIC_DIRECTIONS = ("lower_is_better", "higher_is_better")
COHORT_KEY = "toy-optimizer/val_loss/v1"
SUBMISSION_PATH = "submission/optimizer.py"
SUBMISSION_CONTENT_TYPE = "text/x-python"
KICKOFF_TOPIC = "smr.trigger.initial_runtime_message"
FAILURE = {
    "family": "runtime",
    "detail": "repo_like_task_count_mismatch:requested=2:persisted=3",
    "reason": "task_reconciliation_failed",
    "source": "orchestrator",
}
BUDGET_USD = 5.0

# Fates by run index within a project; indexes past the list hill-climb normally.
FATES = ("climb", "fail", "wedge", "downgrade")

# Wire shapes of the free-form parts (usage entries/totals/tokens/breakdown, cost-summary meters and
# pico amounts, per-actor roles and token keys). "a" is the historical shape; "b" is what another
# deployment could send just as validly. docs/simulator.md ("Shapes") lists every spelling. "c" and "d"
# are shape "a" whose usage entries name only the actor id: in "c" per-actor usage types each actor's
# role; in "d" it types none, the run's `actors` list types the orchestrator, poll-summary's actors the
# workers but the last, and that worker's role is stated nowhere.
SHAPES = ("a", "b", "c", "d")
ACTOR_ID_ONLY = ("c", "d")
B_METER = {"inference": "inference_tokens", "sandbox_seconds": "sandbox_time"}
B_UNIT = {"tokens": "token", "seconds": "second"}
B_ENTRY_ROLE = {"orchestrator": "lead", "worker": "subagent"}
B_PARTICIPANT_ROLE = {"orchestrator": "driver", "worker": "subagent"}
B_PROVIDER = {"inference": "openai", "sandbox_seconds": "docker"}
PROGRESS_TOPIC = "smr.orchestrator.progress"

ORCH_TOOLS = ("spawn_worker", "read_file", "shell", "record_experiment_result", "apply_patch")
WORKER_TOOLS = ("shell", "read_file", "apply_patch", "run_tests", "python")


def parse_shapes(shapes: list[str] | tuple[str, ...] | str) -> tuple[str, ...]:
    """("a", "b") from a sequence or "a,b"; unknown names raise ValueError."""
    if isinstance(shapes, str):
        shapes = [s for s in shapes.split(",")]
    names = tuple(dict.fromkeys(s.strip() for s in shapes if s and s.strip()))
    if not names:
        raise ValueError("shapes must name at least one shape")
    unknown = [s for s in names if s not in SHAPES]
    if unknown:
        raise ValueError(f"unknown shape(s) {unknown}; known: {', '.join(SHAPES)}")
    return names


def parse_metrics(metrics) -> tuple[tuple[str, str], ...]:
    """((name, direction), ...) from pairs or "name:direction" strings; direction defaults to lower."""
    out = []
    for item in metrics:
        if isinstance(item, str):
            name, _, direction = item.partition(":")
        else:
            name, direction = item
        name, direction = str(name).strip(), (str(direction).strip() or METRIC_DIRECTION)
        if not name:
            raise ValueError("a metric needs a name")
        if direction not in METRIC_DIRECTIONS:
            raise ValueError(f"metric {name}: direction must be one of {', '.join(METRIC_DIRECTIONS)}")
        out.append((name, direction))
    if not out:
        raise ValueError("metrics must hold at least one (name, direction)")
    return tuple(out)
