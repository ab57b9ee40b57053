"""Request examples for the API docs: realistic, valid against the contract, and plainly examples.

Swagger UI fills "Try it out" with the first example of an operation; without one it invents a body
from the schema ("string", 0, 2147483647), and a single click wrote that junk into a live project
(walkthrough P1-1). Every write operation gets one here; `tests/api/test_schema.py` checks that each
example passes its operation's own validation. Ids and names say "example" so the data is recognisable
wherever it ends up.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample

EVENTS = OpenApiExample(
    "A few events of one agent step (example)",
    value=[
        {"type": "state", "id": "example-state-1", "state": "running", "ts": "2026-01-05T09:00:00Z"},
        {
            "type": "message",
            "id": "example-kickoff",
            "topic": "kickoff",
            "ts": "2026-01-05T09:00:01Z",
            "body": "Example kickoff: tune the optimizer's warmup; the best so far is 3.318 (submission "
            "#812).",
        },
        {
            "type": "agent.turn",
            "id": "example-turn-1",
            "turn": 1,
            "actor": "driver",
            "model": "gpt-5.4-medium",
            "tokens_in": 12840,
            "tokens_out": 910,
            "cost_usd": 0.0412,
            "duration_ms": 5400,
            "tool_calls": ["read_file", "apply_patch"],
            "prompt": [
                {"role": "system", "content": "You improve submission/optimizer.py."},
                {"role": "user", "content": "The last score was 3.41; try a lower learning rate."},
            ],
            "response": "Lowering lr to 3e-4 and re-running the harness.",
            "ts": "2026-01-05T09:00:06Z",
        },
        {
            "type": "agent.turn",
            "id": "example-turn-2",
            "turn": 2,
            "actor": "worker-1",
            "parent_actor": "driver",
            "model": "gpt-5.4-mini",
            "tokens_in": 3100,
            "tokens_out": 420,
            "cost_usd": 0.0031,
            "tool_calls": ["run_tests"],
            "ts": "2026-01-05T09:00:31Z",
        },
        {
            "type": "metric",
            "id": "example-metric-1",
            "key": "train_loss",
            "value": 3.412,
            "step": 120,
            "ts": "2026-01-05T09:01:10Z",
        },
        {
            "type": "score",
            "id": "example-score-1",
            "score": 3.318,
            "harness_id": "example-harness",
            "artifact": "submission/optimizer.py",
            "details": {"example": True},
            "ts": "2026-01-05T09:02:00Z",
        },
    ],
    description="Sent as is, this writes six example events into the run named in the path. Every event "
    "has an `id`, so sending it twice changes nothing.",
)

PROJECT = OpenApiExample(
    "A push project (example)",
    value={"slug": "example-optimizer", "name": "Optimizer hill-climb (example)"},
    description="Add `scenario` (the key of a scenario you may use, GET /api/v1/scenarios/) to score against "
    "it; without one the project uses the generic scenario.",
)

RUN_SETTINGS = OpenApiExample(
    "A budget and the model asked for (example)",
    value={
        "budget_usd": "25.00",
        "budget_tokens": 5000000,
        "requested_profile": "gpt-5.4-medium",
        "git_branch": "example/warmup-sweep",
    },
)

RUN_LABELS = OpenApiExample(
    "A name and a pin (example)",
    value={"display_name": "Example: warmup sweep, lr 3e-4", "pinned": True},
)

TAG = OpenApiExample("A key → value tag (example)", value={"key": "example-sweep", "value": "warmup-3e-4"})

NOTE = OpenApiExample(
    "A run's note (example)",
    value={
        "body": "Example note: diverged after step 1200 when the warmup was cut to 50 steps.\n\n"
        "#approach: keep 500 warmup steps, sweep the peak lr instead."
    },
)

LOG_LINES = OpenApiExample(
    "A few log lines (example)",
    value={
        "batch_id": "example-batch-1",
        "lines": [
            {"text": "Example: epoch 3 started", "level": "info", "ts": "2026-01-05T09:00:00Z"},
            {
                "text": "Example: checkpoint upload failed, retrying (HTTP 503)",
                "level": "warning",
                "ts": "2026-01-05T09:00:02Z",
                "stream": "stderr",
            },
        ],
    },
)

COMMENT = OpenApiExample(
    "A comment (example)",
    value={"body": "Example comment: the loss spike at step 1200 matches the warmup change."},
)

SCENARIO = OpenApiExample(
    "A scenario (example)",
    value={
        "key": "example-scenario",
        "name": "Example: optimizer arena",
        "score_metric": "val_loss",
        "direction": "minimize",
        "artifact_path": "submission/optimizer.py",
        "artifact_kind": "file",
    },
)

REVIEW = OpenApiExample(
    "A review comment (example)", value={"comment": "Example: checked the diff; the warmup change is sound."}
)

REJECT = OpenApiExample(
    "A rejection reason (example)",
    value={"comment": "Example: the score comes from the public split only."},
    description="A rejection needs a reason: it is kept in the history and carried forward.",
)

BULK = OpenApiExample(
    "Approve three submissions (example)",
    value={"action": "approve", "ids": [812, 813, 815], "comment": "Example: the three warmup variants."},
    description="Each is approved by the usual rules; the answer lists the outcome for each id.",
)

UPLOADED = OpenApiExample(
    "The arena's id for the upload (example)", value={"arena_ref": "https://arena.example/s/812"}
)

REFUSED = OpenApiExample(
    "What the arena said (example)", value={"reason": "Example: the file is over the arena's 50 MB limit."}
)

ARENA_RESULT = OpenApiExample(
    "What the arena said (example)",
    value={"rank": 7, "arena_score": 3.31, "note": "Example: 2 places up after the upload."},
)

ROLLBACK = OpenApiExample(
    "Back to a submission (example)",
    value={"submission": 812, "reason": "Example: the latest score regressed by 0.2."},
    description="A submission id of this run (or `checkpoint`: a checkpoint's external id).",
)

LAUNCH = OpenApiExample(
    "The next run after a failed one (example)",
    value={
        "from_run": "example-run",
        "text": "Example: keep the warmup, halve the learning rate, score every candidate.",
        "budget_usd": "2.50",
        "budget_tokens": 1500000,
    },
    description="Omitted fields take the form's prefill: the model profile and budget of `from_run` and "
    "a kickoff of the carry-forward block followed by `text`.",
)

RUN_CLOSE = OpenApiExample(
    "Close a silent run (example)",
    value={"reason": "Example: the harness was OOM-killed at 03:12 and never restarted."},
    description="The reason is shown on the run page and kept in the audit trail.",
)

RUN_MESSAGE = OpenApiExample(
    "Steer the agent (example)",
    value={
        "body": "Example: the last three attempts overfit; try weight decay 0.05 before widening the MLP."
    },
)

ALERT_RULE = OpenApiExample(
    "Email the on-call address when a run fails (example)",
    value={"trigger": "run.failed", "channel": "email", "target": "oncall@example.com"},
    description="`channel` is email (`target`: an address), slack or webhook (`target`: an https URL; "
    "private addresses are refused) or inbox (`recipient`: a member's user name). `threshold` and "
    "`window` only for the triggers that take them, e.g. run.budget's fraction of the budget.",
    request_only=True,
)

ALERT_RULE_WEBHOOK = OpenApiExample(
    "A signed webhook at 80 % of a run's budget (example)",
    value={
        "trigger": "run.budget",
        "threshold": 0.8,
        "channel": "webhook",
        "target": "https://hooks.example.com/smrweb-alerts",
    },
    description="The answer carries `secret` once: the receiver checks `X-Smrweb-Signature` with it.",
    request_only=True,
)

ALERT_RULE_DIGEST = OpenApiExample(
    "A review digest by email every hour (example)",
    value={
        "trigger": "submission.needs_review",
        "channel": "email",
        "target": "reviewers@example.com",
        "delivery": "digest",
        "digest_minutes": 60,
    },
    description="One email an hour listing the submissions that passed their validator, instead of one "
    "each. A rule with the same trigger, options and destination as an existing one is refused (400 "
    "`duplicate_rule`, naming it).",
    request_only=True,
)

INBOX_READ = OpenApiExample(
    "Mark every needs-review notification of a project read (example)",
    value={"kind": "submission.needs_review", "project": "example-project", "upto": 4821},
    description='Or `{"ids": [1, 2]}`. `upto` (the newest id you saw) leaves what arrived since unread.',
    request_only=True,
)

ALERT_RULE_MUTE = OpenApiExample(
    "Mute the rule (example)",
    value={"muted": True},
    description="While muted, what the rule would send is logged as suppressed and never sent later.",
    request_only=True,
)

SPEND_GUARD = OpenApiExample(
    "Limits of $20 or 500 turns since the best score, and a $200 day budget (example)",
    value={"spend_stop_usd": 20, "spend_stop_turns": 500, "day_budget_usd": 200},
    description="Only the fields given change. `spend_stop` off | pause | stop switches the spend-aware stop "
    "on; its limits (any may be null): `spend_stop_usd`, `spend_stop_turns`, `spend_stop_tokens` since the "
    "best score, `spend_stop_usd_per_point` over the last `spend_stop_window` turns. `day_budget_usd` null "
    "turns the day budget off; `day_zone` is the project's clock (an IANA zone).",
    request_only=True,
)

SAVED_VIEW = OpenApiExample(
    "A shared view of the runs table (example)",
    value={
        "name": "Example: sonnet runs by lowest val_loss",
        "query": "tag=model%3Dsonnet&col=param%3Alr&col=metric%3Aval_loss%3Amin"
        "&sort=col%3Ametric%3Aval_loss%3Amin",
        "shared": True,
    },
)
