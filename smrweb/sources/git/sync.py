"""A git project's sync: each new commit touching the artifact path → an artifact version and a
checkpoint; the scores file at the head → scores. Cursor: the last commit and the scores file's blob."""

from __future__ import annotations

import hashlib
import io
import json
import math
import mimetypes
from typing import Any

from smrweb.sources.apply import apply_events
from smrweb.sources.base import Malformed
from smrweb.sources.git.branches import run_id_for
from smrweb.sources.git.cli import HEX_RE, OID_RE, check_artifact_path
from smrweb.sources.git.mirror import Repo
from smrweb.tracking import services
from smrweb.tracking.errors import InvalidEvents
from smrweb.tracking.models import Project, Run

SCORES_FILE = ".smrweb/scores.jsonl"
SCORE_FIELDS = frozenset({"score", "commit", "ts", "note", "details"})


def _apply(project: Project, rid: str, events: list[dict]) -> int:
    try:
        return apply_events(project, rid, [(None, event) for event in events]).accepted
    except InvalidEvents as exc:
        raise Malformed(
            f"{SCORES_FILE} or the commits hold data outside the contract: "
            f"{[(e.index, e.field, e.message) for e in exc.errors[:3]]}"
        ) from exc


def sync_branch(project: Project, *, report) -> None:
    """New commits that touch the artifact path (each stored and its cursor saved at once), then the
    scores file at the head when its blob changed. Safe to repeat: versions are keyed by (bytes, commit),
    checkpoints and scores by ids derived from commits."""
    repo = Repo.for_project(project)
    scenario = project.scenario
    path = check_artifact_path(scenario.artifact_path)
    rid = run_id_for(repo.branch)
    run = Run.objects.filter(project=project, external_id=rid).first()
    cursor = dict(run.source_cursor) if run else {}
    head = repo.refresh()
    report.listed = 1
    since = cursor.get("commit")
    if since and (not OID_RE.match(str(since)) or not repo.is_ancestor(since, head)):
        since = None  # the branch was rewritten (or the cursor is foreign): rescan; ids make repeats no-ops
    content_type = mimetypes.guess_type(path)[0] or "application/octet-stream"
    for commit in repo.commits_touching(head, since, path):
        entry = repo.entry(commit.sha, path)
        label = f"{commit.sha[:10]} {commit.subject}"[:500]
        checkpoint: dict[str, Any] = {
            "id": f"git:{commit.sha}",
            "type": "checkpoint",
            "ts": commit.ts,
            "label": label,
            "commit": commit.sha,
        }
        if entry is None:  # the commit deleted the path: lineage, but nothing to store or restore
            checkpoint.update(restorable=False, failure_reason=f"{path} does not exist at this commit.")
        else:
            content = repo.read_blob(entry, what=f"{path} at {commit.sha[:10]}")
            _, created = services.store_artifact(
                project,
                rid,
                path=path,
                content=io.BytesIO(content),
                kind=scenario.artifact_kind,
                content_type=content_type,
                commit=commit.sha,
            )
            report.artifacts_pulled += created
        report.events_accepted += _apply(project, rid, [checkpoint])
        cursor["commit"] = commit.sha
        services.record_poll(project, rid, source_cursor=dict(cursor))
    cursor["commit"] = head
    scores = repo.entry(head, SCORES_FILE)
    if scores is not None and scores.oid != cursor.get("scores"):
        events = score_events(
            repo,
            repo.read_blob(scores, what=SCORES_FILE),
            path=path,
            harness_id=scenario.harness_id or "git",
            skip=_inherited_lines(repo, cursor.get("base")),
        )
        report.events_accepted += _apply(project, rid, events)
        cursor["scores"] = scores.oid
    services.record_poll(
        project, rid, source_cursor=dict(cursor), git_branch=repo.branch[:200], git_commit=head
    )
    report.synced = 1


def _inherited_lines(repo: Repo, base: Any) -> frozenset[bytes]:
    """The scores file's lines at the commit a launched branch started from: the run it came from
    scored those, so the new run does not count them again."""
    if not isinstance(base, str) or not OID_RE.match(base):
        return frozenset()
    entry = repo.entry(base, SCORES_FILE)
    if entry is None or entry.type != "blob":
        return frozenset()
    data = repo.read_blob(entry, what=f"{SCORES_FILE} at {base[:10]}")
    return frozenset(line.strip() for line in data.split(b"\n") if line.strip())


def score_events(
    repo: Repo, data: bytes, *, path: str, harness_id: str, skip: frozenset[bytes] = frozenset()
) -> list[dict]:
    """The score events of a scores file: one JSON object a line, `score` and `commit` required
    (lines in `skip` are left out: a launched branch's inherited scores)."""
    events: list[dict] = []
    commits: dict[str, str | None] = {}
    digests: dict[str, str | None] = {}
    for number, raw in enumerate(data.split(b"\n"), 1):
        line = raw.strip()
        if not line or line in skip:
            continue
        where = f"{SCORES_FILE} line {number}"
        try:
            item = json.loads(line)
        except ValueError:
            raise Malformed(f"{where}: not JSON.") from None
        if not isinstance(item, dict):
            raise Malformed(f'{where}: expected an object like {{"score": 0.8, "commit": "<sha>"}}.')
        if unknown := set(item) - SCORE_FIELDS:
            raise Malformed(
                f"{where}: unknown field(s) {', '.join(sorted(unknown))}; "
                f"known: {', '.join(sorted(SCORE_FIELDS))}."
            )
        score = item.get("score")
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            raise Malformed(f"{where}: `score` must be a finite number.")
        name = item.get("commit")
        if not isinstance(name, str) or not HEX_RE.match(name):
            raise Malformed(f"{where}: `commit` must be a commit hash (4 to 64 hexadecimal characters).")
        if name not in commits:
            commits[name] = repo.resolve(name)
        sha = commits[name]
        if sha is None:
            raise Malformed(
                f"{where}: no commit {name} in the repository (or the abbreviation is ambiguous)."
            )
        ts, note, details = item.get("ts"), item.get("note"), item.get("details", {})
        if ts is not None and not isinstance(ts, str):
            raise Malformed(f"{where}: `ts` must be an RFC 3339 timestamp string.")
        if note is not None and not isinstance(note, str):
            raise Malformed(f"{where}: `note` must be a string.")
        if not isinstance(details, dict):
            raise Malformed(f"{where}: `details` must be an object.")
        if sha not in digests:  # the bytes of the artifact path at that commit: what the score is of
            entry = repo.entry(sha, path)
            digests[sha] = (
                hashlib.sha256(repo.read_blob(entry, what=f"{path} at {sha[:10]}")).hexdigest()
                if entry is not None and entry.type == "blob"
                else None
            )
        events.append(
            {
                "id": f"git:{sha}:{hashlib.sha256(line).hexdigest()[:16]}",
                "type": "score",
                "score": score,
                "ts": ts if ts is not None else repo.commit_time(sha),
                "commit": sha,
                "harness_id": harness_id[:200],
                "artifact": digests[sha],
                "details": {**details, **({"note": note} if note else {})},
            }
        )
    return events
