"""The simulator's in-memory world: projects, runs and everything a run emits, advanced tick by tick.

Nothing here knows about HTTP or Django (stdlib only). Every value is a function of the seed, the start
time and the number of ticks applied (plus whatever clients did through `stop` / `restore`), so two
worlds built with the same arguments and advanced the same way are equal field for field
(tests/simulator/test_determinism.py pins the digests).

Layout, one noun a module; `World` (core.py) combines one mixin per noun:

- `constants`: profiles, prices, metrics, fates, wire-shape spellings; `parse_shapes`, `parse_metrics`
- `money`: pico-USD and its conversions; `wireformat`: ISO times and digest-derived ids
- `state`: the `Actor` and `SimRun` records; `errors`: `NotFound`, `Conflict`
- `core`: `World` (options, clock, lock); `runs`: planning, lifecycle, `stop`, `run_wire`
- `activity`: one live tick of a run; `usage`: the ledger and its wire shapes
- `experiments`: attempts, results, improvements; `artifacts`: submissions; `checkpoints`: + `restore`
- `messages`: the runtime message log; `steering`: messages clients send, pause / resume
- `projects`: projects and run listing; `truth`: `state()`
- `launches`: `trigger` (a run started through the API, idempotent by key) and a run's limit

This package re-exports the names other code imports from `smrweb.simulator.world`.
"""

from smrweb.simulator.world.artifacts import render_optimizer
from smrweb.simulator.world.constants import (
    B_ENTRY_ROLE,
    B_METER,
    B_PARTICIPANT_ROLE,
    B_PROVIDER,
    B_UNIT,
    BUDGET_USD,
    COHORT_KEY,
    DEFAULT_METRICS,
    DEFAULT_PROJECT_ID,
    FAILURE,
    FATES,
    KICKOFF_TOPIC,
    METRIC,
    METRIC_DIRECTION,
    METRIC_DIRECTIONS,
    MODEL_PRICE,
    ORCH_DOWNGRADED_PROFILE,
    ORCH_PROFILE,
    ORCH_TOOLS,
    ORG_ID,
    PROFILE_MODEL,
    PROGRESS_TOPIC,
    SANDBOX_PICO_PER_SECOND,
    SHAPES,
    SUBMISSION_CONTENT_TYPE,
    SUBMISSION_PATH,
    WORKER_DOWNGRADED_PROFILE,
    WORKER_PROFILE,
    WORKER_TOOLS,
    parse_metrics,
    parse_shapes,
)
from smrweb.simulator.world.core import World
from smrweb.simulator.world.errors import Conflict, NotFound
from smrweb.simulator.world.money import (
    PICO_PER_CENT,
    PICO_PER_USD,
    pico_to_cents,
    pico_to_usd,
    pico_to_usd_text,
)
from smrweb.simulator.world.state import Actor, SimRun
from smrweb.simulator.world.wireformat import iso, parse_iso

__all__ = [
    "BUDGET_USD",
    "B_ENTRY_ROLE",
    "B_METER",
    "B_PARTICIPANT_ROLE",
    "B_PROVIDER",
    "B_UNIT",
    "COHORT_KEY",
    "DEFAULT_METRICS",
    "DEFAULT_PROJECT_ID",
    "FAILURE",
    "FATES",
    "KICKOFF_TOPIC",
    "METRIC",
    "METRIC_DIRECTION",
    "METRIC_DIRECTIONS",
    "MODEL_PRICE",
    "ORCH_DOWNGRADED_PROFILE",
    "ORCH_PROFILE",
    "ORCH_TOOLS",
    "ORG_ID",
    "PICO_PER_CENT",
    "PICO_PER_USD",
    "PROFILE_MODEL",
    "PROGRESS_TOPIC",
    "SANDBOX_PICO_PER_SECOND",
    "SHAPES",
    "SUBMISSION_CONTENT_TYPE",
    "SUBMISSION_PATH",
    "WORKER_DOWNGRADED_PROFILE",
    "WORKER_PROFILE",
    "WORKER_TOOLS",
    "Actor",
    "Conflict",
    "NotFound",
    "SimRun",
    "World",
    "iso",
    "parse_iso",
    "parse_metrics",
    "parse_shapes",
    "pico_to_cents",
    "pico_to_usd",
    "pico_to_usd_text",
    "render_optimizer",
]
