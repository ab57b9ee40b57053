"""Every key smrweb keeps in the shared cache (Django's `cache`, Redis), built in one place: what each holds,
how long it lives and who forgets it. A module that reads or writes the cache takes its key from here
(tests/core/test_cachekeys.py fails on a key built by hand anywhere else).

Django adds the deployment's `KEY_PREFIX` (SMRWEB_CACHE_KEY_PREFIX, "smrweb") and version, so test
sessions and installs sharing one Redis stay apart. The strings below are those a running deployment
already holds: a changed key only costs a miss for the caches, but would let two workers hold the same
lease or claim across a deploy — bump a cache key's `vN` when what it holds changes shape, and leave the
lease and claim keys alone.

Reads and writes that only save work go through `core.softcache` (a cache that is down is a miss); the
leases and claims (marked "lock" below) use the cache for correctness and handle an outage themselves.
"""

from __future__ import annotations

import hashlib

# --- caches: a miss recomputes; the strings may change (bump vN) when what they hold changes --------------


def kept(name: str, version: str) -> str:
    """A domain read kept under the version of what it read (`queries.kept.kept`), 120 s. Nobody forgets
    it: the caller's version moves on with every write that changes the read. `name` is one of the
    `kept_*` names below."""
    return f"kept:v1:{name}:{version}"


def kept_project_summaries(unverified: bool, projects: str) -> str:
    """Name (under `kept`) of the overview's per-project figures for one set of `projects` (their pks and
    directions, e.g. "3+,4-"; digested)."""
    return (
        f"project-summaries:{int(unverified)}:{hashlib.blake2s(projects.encode(), digest_size=8).hexdigest()}"
    )


def kept_board_bests(project_pk: int, unverified: bool) -> str:
    """Name (under `kept`) of a project's leaderboard bests."""
    return f"board-bests:{project_pk}:{int(unverified)}"


def kept_score_history(run_pk: int, per_run: int) -> str:
    """Name (under `kept`, with the run's submissions' marker as the version) of a run's last `per_run`
    scores: the runs table's sparkline (queries.runs `kept_score_histories`)."""
    return f"score-history:{run_pk}:{per_run}"


def turn_aggregates(run_pk: int) -> str:
    """A run's `TurnMemo` (queries.timeline), 24 h, brought up to date on read from the turns past its
    mark. Forgotten by `turn_memo.forget_turn_aggregates` (the write path when turns move sides)."""
    return f"turn-aggregates:v2:{run_pk}"  # v2: the class was renamed (a v1 entry would not unpickle)


def turn_aggregates_stamp(run_pk: int) -> str:
    """Which computation of a run's `TurnMemo` is current (a random token), 24 h: each process's copy of the
    memo (core.localcache) carries the stamp it descends from. Forgotten with the memo."""
    return f"turn-aggregates-stamp:{run_pk}"


def turns_after(run_pk: int, moment: str = "best") -> str:
    """The turns, tokens and USD of a run after one moment (its best score's, or its first counted score's
    for the efficiency) and the turns they were read from (queries.timeline `turns_after`), 24 h, advanced
    by the turns past its mark. Nobody forgets it: checked against the run's turn count on read."""
    return f"turns-after:v1:{run_pk}" + ("" if moment == "best" else f":{moment}")


def timeline_scores(run_pk: int, direction: str) -> str:
    """A run timeline's score side (the points plotted, why each does not count, the turn before each, the
    best-so-far frontier; queries.timeline), 1 h, for the scenario's `direction` ("1" maximize), with the
    version of the run's scores it shows: a new score is added to it. Nobody forgets it: a turn at or before
    its last score, a changed or deleted score are checked for on each read."""
    return f"timeline-scores:v2:{run_pk}:{direction}"  # v2: one per run, extended (was: one per version)


def compare_series(run_pk: int, updated: float, *, maximize: bool, per_run: int) -> str:
    """A run's comparison series and turn statistics (queries.compare), 1 h. Nobody forgets it: the
    run's `updated` (a timestamp) is in the key and moves with every write to the run. (v3: with the
    turns of role unknown.)"""
    return f"compare-series:v3:{run_pk}:{updated:.6f}:{int(maximize)}:{per_run}"


def compare_trace(run_pk: int, version: str) -> str:
    """A compared run's trace of one metric on one axis (queries.series), under what it is drawn from, 1 h."""
    return f"compare-trace:v1:{run_pk}:{hashlib.blake2s(version.encode(), digest_size=12).hexdigest()}"


def compare_arms(version: str) -> str:
    """Compare's arms (queries.arms) under the compared traces' versions and the runs' arm labels, 1 h."""
    return f"compare-arms:v1:{hashlib.blake2s(version.encode(), digest_size=16).hexdigest()}"


def compare_card(version: str) -> str:
    """Compare's "any metric" card as rendered, under its version (views/compare.py), 1 h."""
    return f"compare-card:v1:{version}"


def compare_interval(values: str) -> str:
    """A bootstrap interval of Compare's arms (queries.arms) under the values it is computed from, 1 h."""
    return f"compare-interval:v1:{hashlib.blake2s(values.encode(), digest_size=16).hexdigest()}"


def compare_turns(run_pk: int, *, per_run: int) -> str:
    """What a compared run's turn side was read from (queries.compare `TurnBase`: its turn count, highest
    turn id, statistics and spend rows as thinned), 1 h, so a read after new turns reads those alone. Not
    under the run's `updated`: it is checked against the run's turn count and the new turns on each read."""
    return f"compare-turns:v1:{run_pk}:{per_run}"


def compare_scores(run_pk: int, *, maximize: bool, per_run: int) -> str:
    """A compared run's score rows as thinned (queries.compare `ScoreBase`: with its score count, highest id
    and `updated`), 1 h, so a read after new scores reads those alone. Not under the run's `updated`: it
    is checked against the run's score count and the scores since on each read."""
    return f"compare-scores:v1:{run_pk}:{int(maximize)}:{per_run}"


def compare_parts(run_pk: int, updated: float, version: str) -> str:
    """A compared run's parts of the Compare figures, encoded (dashboard.charts.compare `RunParts`), 1 h,
    under the run's `updated` and `version` (its colour, the time unit, the metric, the resolution, the
    code). Nobody forgets it: what it is built from is in the key."""
    return f"compare-parts:v1:{run_pk}:{updated:.6f}:{version}"


def compare_row(run_pk: int, updated: float, version: str) -> str:
    """A compared run's rows of Compare's two tables, as written (dashboard.charts.compare `RowText`), 1 h,
    under the run's `updated` and `version` (its colour, the baseline's marker, its parent's, the slug,
    the viewer's clock, the code). Nobody forgets it: what it is built from is in the key."""
    return f"compare-row:v1:{run_pk}:{updated:.6f}:{version}"


def compare_run(
    run_pk: int, updated: float, parent_updated: float | None, *, maximize: bool, per_run: int
) -> str:
    """A compared run whole: its row (with its parent's) and its comparison series (queries.compare), 1 h.
    Nobody forgets it: the run's and its parent's `updated` are in the key, as in Compare's version."""
    parent = f"{parent_updated:.6f}" if parent_updated is not None else "-"
    return f"compare-run:v1:{run_pk}:{updated:.6f}:{parent}:{int(maximize)}:{per_run}"


def project_chart_piece(
    run_pk: int, scores: str, *, unverified: bool, maximize: bool, stride: int, share: int
) -> str:
    """One run's piece of the project chart (queries.project_chart.RunPiece) at one resolution, 1 h.
    Nobody forgets it: `scores`, a digest of the run's submissions marker, moves with every write to them
    (and not with a new turn, which the chart does not draw)."""
    return f"project-chart-piece:v2:{run_pk}:{scores}:{int(unverified)}:{int(maximize)}:{stride}:{share}"


def project_chart_frontier(project_pk: int, unverified: bool, maximize: bool, runs: str) -> str:
    """The project chart's merged best so far and the runs' records it was merged from
    (queries.project_chart.KeptFrontier), for one set of drawn `runs` (a digest), 1 h; overwritten by
    each read that extends or rebuilds it."""
    return f"project-chart-frontier:v1:{project_pk}:{int(unverified)}:{int(maximize)}:{runs}"


def preview(sha256: str, limit: int, path: str, kind: str, content_type: str) -> str:
    """An artifact's rendered preview (queries.review), 7 days. Never forgotten: a blob's bytes never
    change, so neither does what is drawn from them."""
    return f"preview:v1:{sha256}:{limit}:{path}:{kind}:{content_type}"


def highlighted(sha256: str, path: str, content_type: str) -> str:
    """An artifact's syntax-highlighted lines for the review diff (queries.review), 7 days; never
    forgotten (as `preview`)."""
    return f"highlighted:v1:{sha256}:{path}:{content_type}"


def clock(user_id: int) -> str:
    """A user's (clock, local zone) choice (dashboard.clock), 1 h. Forgotten by `clock.set_clock`."""
    return f"clock:{user_id}"


def live_card(scope: str, name: str, version: str) -> str:
    """A live card's marked render (zlib), a step between two versions, a poll's whole answer (`name`
    "answer"), a card's skeleton and part versions (`name` "CARD~parts") or one part's render
    ("CARD:PART", `live.Deck._part_steps`), one row of a card's list (`name` "row", `live.kept_rows`) or a
    reading a card's version depends on (`live.remembered`) of one page (`scope`, e.g. "run-12";
    dashboard.live), 180 s. Nobody forgets it: the version names everything the card shows."""
    return f"live:{scope}:{name}:{version}"


# --- locks: the cache used for correctness; these strings must stay as they are -------------------------


def live_claim(card_key: str) -> str:
    """Lock: one request renders the card version `card_key` (a `live_card` key) while the others wait
    for it, 10 s; released by the renderer (dashboard.live.Deck). Cache down: everyone renders."""
    return f"{card_key}:lock"


def run_lease(db_name: str, project_pk: int, rid: str) -> str:
    """Lock: one worker syncs an SMR run (sources.sync.RunLease), SMRWEB_SMR_RUN_LEASE_SECONDS, renewed
    while it syncs and released at its end. The database's name is in it: test sessions share Redis."""
    where = f"{db_name}|{project_pk}|{rid}"
    return f"smr-run-lease:{hashlib.blake2b(where.encode(), digest_size=12).hexdigest()}"


def blob_pull(db_name: str, sha256: str) -> str:
    """Lock: one worker downloads a blob two runs share (sources.sync._pull_lease), 4 × the run lease;
    released once its run's write stored the bytes."""
    return f"smr-blob-pull:{db_name}:{sha256}"


def alerts_due(kind: str, object_id: int) -> str:
    """Claim: one queued alert evaluation per subject (smrweb.tasks), 60 s; cleared when the evaluation
    starts, so a change after that queues another."""
    return f"alerts:due:{kind}:{object_id}"


def alerts_swept_at() -> str:
    """When the alert sweep last ran (smrweb.tasks.sweep_alerts), no expiry; overwritten by each sweep."""
    return "alerts:swept-at"


def verifying(submission_id: int) -> str:
    """Claim: a validator runs for this submission (smrweb.tasks.verify_submission), 3 heartbeats,
    renewed by its progress lines and released when it ends."""
    return f"smrweb:verifying:{submission_id}"


# --- raw Redis, outside Django's cache (no KEY_PREFIX added) ---------------------------------------------


def preflight(request_id: str) -> str:
    """A scenario preflight's request and report (smrweb.tasks, on REDIS_URL itself), 600 s."""
    return f"smrweb:preflight:{request_id}"
