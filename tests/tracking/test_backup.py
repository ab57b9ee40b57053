"""Project backups (`tracking.backup`, `export_project` / `import_project`): a project with rows of
every kind round-trips field by field, under a new slug and into an emptied database; a tampered,
unknown or clashing archive is refused with nothing written."""

from __future__ import annotations

import hashlib
import io
import json
import threading
import zipfile
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from smrweb.core.secrets import reveal
from smrweb.tracking import backup, services
from smrweb.tracking import events as ev
from smrweb.tracking.backup import BackupError
from smrweb.tracking.models import (
    AgentTurn,
    AlertRule,
    ApiToken,
    ArenaResult,
    Artifact,
    ArtifactBlob,
    AuditEvent,
    Checkpoint,
    Comment,
    Experiment,
    GuardEpisode,
    KnowledgeEntry,
    LoopFinding,
    Membership,
    MetricPoint,
    Notification,
    Project,
    ProjectInvitation,
    Review,
    Role,
    Rollback,
    Run,
    RunControl,
    RunLaunch,
    RunLogBatch,
    RunLogLine,
    RunNote,
    RunParam,
    RunSnooze,
    RunTag,
    RuntimeMessage,
    SavedView,
    Scenario,
    ShareLink,
    SourceHealth,
    StateChange,
    Submission,
    SubmissionTransition,
    TurnBody,
    VerificationOutcome,
)
from smrweb.tracking.services import dispatched, handoff, knowledge, launches, logs, rollbacks
from smrweb.tracking.services import submissions as lifecycle
from smrweb.tracking.services.alerts import evaluation as alert_evaluation
from smrweb.tracking.services.alerts import guards
from tests.factories import UserFactory, admin_project

pytestmark = pytest.mark.django_db
User = get_user_model()
T0 = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
SHARED = b"\x00\x01weights\xff" * 3000  # one blob in two runs (and in two paths)


def at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def ingest(project, run_id: str, *events: dict) -> None:
    """Through the real validator and write path, as every source does."""
    services.ingest_events(project, run_id, ev.parse_events(json.dumps(list(events))))


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    # Tiny chunks, so every path through chunked export, line splitting and chunked inserts runs.
    monkeypatch.setattr(backup.tables, "CHUNK_SIZE", 3)
    monkeypatch.setattr(backup.tables, "COPY_BYTES", 97)


@pytest.fixture
def rich(alice, bob, victor):
    """A project with rows of every kind, made through the services."""
    scenario = services.create_scenario(
        key="bench",
        name="Bench",
        description="A benchmark",
        harness_id="h-1",
        artifact_path="model.py",
        artifact_kind="python_source",
        score_min=0.0,
        score_max=1.0,
        validator_command=["python", "{artifact}"],
        scoring_command=["score", "{artifact}"],
        required_toolchains=["python3"],
        arena_name="The Arena",
        arena_url="https://arena.example.com/",
        arena_daily_limit=5,
        arena_timezone="America/Chicago",
        arena_resets_at=time(7, 45),
        by=alice,
    )
    project = admin_project("hill", name="Hill climb", scenario=scenario, by=alice)
    services.add_member(project, bob, role=Role.REVIEWER, by=alice)
    services.add_member(project, victor, role=Role.VIEWER, by=alice)
    dora = UserFactory(username="dora", first_name="Dora", last_name="Explorer", email="dora@example.org")
    services.add_member(project, dora, role=Role.VIEWER, by=alice)
    services.invite_member(project, email="Erin@Example.org", role=Role.REVIEWER, by=alice)
    services.revoke_invitation(
        services.invite_member(project, email="fay@example.org", role=Role.VIEWER, by=alice), by=alice
    )
    services.update_project(
        project,
        by=alice,
        knowledge="Try smaller steps.",
        require_second_reviewer=True,
        regression_threshold=0.05,
        rollback_webhook_url="https://hooks.example.com/rollback",
        stall_after=timedelta(minutes=7, microseconds=5),
        capture_turn_bodies=True,
    )
    services.set_source_backend(
        project, backend_base="https://smr.example.com", api_key="sk-secret", by=alice
    )
    _, raw = services.create_api_token(project, name="ci", by=alice)
    services.authenticate_token(raw)  # sets last_used_at
    old, _ = services.create_api_token(project, name="old", by=alice)
    services.revoke_api_token(old, by=alice)
    project.raw_token = raw
    # Read-only share links (issue 39): one live, one revoked (their hashes carried, with --trust only).
    services.create_share_link(by=bob, kind="compare", days=30, query="runs=r1&runs=r2", project=project)
    shared, _ = services.create_share_link(by=alice, kind="tree", days=1, project=project)
    services.revoke_share_link(shared, by=alice)

    services.update_run_settings(
        project,
        "r1",
        by=alice,
        budget_usd=Decimal("12.5"),
        budget_tokens=1_000_000,
        requested_profile="large",
        actual_profile="small",
        git_branch="main",
        git_commit="abc123",
    )
    ingest(
        project,
        "r1",
        *[
            {
                "type": "metric",
                "id": f"m{i}",
                "key": "loss" if i % 2 else "acc",
                "value": 1 / (i + 1),
                "step": i,
                "ts": at(i),
            }
            for i in range(25)
        ],
    )
    ingest(
        project,
        "r1",
        {
            "type": "agent.turn",
            "id": "t1",
            "turn": 1,
            "model": "gpt-x",
            "tokens_in": 100,
            "tokens_out": 10,
            "cost_usd": 0.25,
            "tool_calls": ["bash", {"name": "edit", "args": {"path": "a.py"}}],
            "duration_ms": 1200,
            "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "héllo ✓"}],
            "response": "<b>done</b>\nsecond line",
            "ts": at(1),
        },
        {
            "type": "agent.turn",
            "id": "t2",
            "turn": 1,
            "actor": "w1",
            "parent_actor": "driver",
            "tokens_in": 50,
            "tokens_out": 5,
            "cost_usd": 0.125,
            "ts": at(2),
        },
        {
            "type": "message",
            "id": "msg1",
            "body": 'héllo — ünïcode ✓\nsecond line "quoted"',
            "topic": "status",
            "target": "driver",
            "mode": "queue",
            "ts": at(3),
        },
        {"type": "message", "id": "msg2", "body": "two", "ts": at(4)},
        {"type": "checkpoint", "id": "cp1", "label": "first", "commit": "abc123", "ts": at(3)},
        {
            "type": "checkpoint",
            "id": "cp2",
            "label": "broken",
            "restorable": False,
            "failure_reason": "disk full",
            "ts": at(4),
        },
        {"type": "state", "id": "st1", "state": "executing", "ts": at(3)},
    )
    # A score that names its artifact before the bytes arrive, then two versions of that path.
    ingest(
        project,
        "r1",
        {
            "type": "score",
            "id": "s1",
            "score": 0.4,
            "experiment": "e1",
            "artifact": "model.py",
            "details": {"seed": 7, "notes": ["a", {"b": None}]},
            "commit": "abc123",
            "harness_id": "h1",
            "ts": at(5),
        },
    )
    services.store_artifact(
        project,
        "r1",
        path="model.py",
        content=io.BytesIO(b"print('v1')\n"),
        kind="python_source",
        content_type="text/x-python",
        commit="abc123",
        by=alice,
    )
    services.store_artifact(
        project, "r1", path="model.py", content=io.BytesIO(b"print('v2')\n"), kind="python_source"
    )
    services.store_artifact(project, "r1", path="weights.bin", content=io.BytesIO(SHARED))
    ingest(
        project,
        "r1",
        {"type": "score", "id": "s2", "score": 0.9, "experiment": "e2", "artifact": sha(SHARED), "ts": at(6)},
        {"type": "score", "id": "s3", "score": 0.2, "ts": at(7)},
    )
    services.store_artifact(project, "r2", path="copy.bin", content=io.BytesIO(SHARED))
    ingest(
        project,
        "r2",
        {"type": "agent.turn", "id": "u1", "turn": 1, "tokens_in": 7, "cost_usd": 0.01, "ts": at(1)},
        {"type": "score", "id": "x1", "score": 0.1, "ts": at(2)},
        {"type": "checkpoint", "id": "c1", "label": "r2 start", "ts": at(1)},
        {
            "type": "state",
            "id": "f",
            "state": "failed",
            "failure": {"family": "oom", "detail": "killed", "source": "sandbox"},
            "ts": at(9),
        },
    )
    services.record_poll(
        project,
        "r2",
        live_phase="finalizing",
        terminal_outcome="failed",
        other_meters_usd=Decimal("0.75"),
        source_total_usd=Decimal("1.234567"),
        source_updated_at=T0,
        source_cursor={"usage": "entry-9", "messages": [1, 2]},
    )
    # No service edits the experiment tree yet; its columns must survive all the same.
    e1 = Experiment.objects.get(run__project=project, external_id="e1")
    Experiment.objects.filter(run__project=project, external_id="e2").update(
        parent=e1,
        title="smaller lr",
        hypothesis="lower is steadier",
        status="done",
        verdict="better",
        commit="def456",
        metrics_before={"loss": 0.9},
        metrics_after={"loss": 0.7},
    )

    best = Submission.objects.get(project=project, event_id="s2")
    lifecycle.request_verification(best, by=None, automatic=True)  # auto-verify: no proposer
    passed = lifecycle.VerificationResult(VerificationOutcome.PASSED, 0, "ok", "exit 0")
    lifecycle.record_verification(best.pk, passed)
    best.refresh_from_db()
    lifecycle.review(best, by=bob, verdict="approve")  # approval 1 of 2 (the second-person rule)
    lifecycle.review(best, by=bob, verdict="approve")  # the same person again: recorded, not counted
    best = lifecycle.review(best, by=alice, verdict="approve", comment="fine").submission
    best = handoff.mark_uploaded(best, by=alice)
    handoff.record_arena_result(best, by=alice, rank=3, arena_score=88.5, note="top 3")
    bad = lifecycle.request_verification(Submission.objects.get(project=project, event_id="s3"), by=bob)
    failed = lifecycle.VerificationResult(VerificationOutcome.FAILED, 1, "no", "exit 1")
    lifecycle.record_verification(bad.pk, failed)
    knowledge.add_entry(
        project, by=bob, kind="failed_approach", title="lr too high", body="diverged", submission=bad
    )

    done = rollbacks.request_rollback(
        by=bob,
        reason="back to start",
        checkpoint=Checkpoint.objects.get(run__project=project, external_id="c1"),
    )
    dispatched.start_attempt(Rollback, done.rollback.pk)
    dispatched.note_attempt(Rollback, done.rollback.pk, "posted")
    rollbacks.finish(done.rollback.pk, ok=True, detail="applied")
    rollbacks.request_rollback(
        by=alice, reason="regressed", submission=Submission.objects.get(project=project, event_id="s1")
    )  # left open

    services.claim_source_lease(project, owner="worker-1", seconds=600)
    services.record_source_success(project, active_runs=1, next_in=30)
    services.record_source_failure(project, kind="timeout", message="SMR did not answer", retry_in=60)
    services.flag_stalled_runs(now=timezone.now() + timedelta(days=1))
    r1 = Run.objects.get(project=project, external_id="r1")
    services.request_stop(r1, by=alice)
    services.record_stop_result(r1, ok=False, detail="refused")
    # Alerts: an inbox rule and a webhook rule (its secret too), their notifications, a snooze and a loop.
    services.create_alert_rule(project, by=alice, trigger="run.loop", channel="inbox", recipient="bob")
    services.create_alert_rule(
        project, by=alice, trigger="run.failed", channel="webhook", target="https://hooks.example/a"
    )
    grep = {"name": "grep", "arguments": {"q": "needle"}}
    ingest(
        project,
        "r2",
        *[
            {
                "type": "agent.turn",
                "id": f"g{n}",
                "turn": n,
                "actor": "looper",
                "tool_calls": [grep],
                "ts": at(n),
            }
            for n in range(4)
        ],
    )
    alert_evaluation.evaluate_run(Run.objects.get(project=project, external_id="r2").pk)
    services.snooze_run(r1, by=bob, hours=3)
    # What people wrote: tags (a label and a key → value), a name and a pin, a note, comments on a run
    # and on a submission (one deleted), and the mention that landed in alice's inbox.
    services.set_tag(r1, key="baseline", by=bob)
    services.set_tag(r1, key="model", value="gpt-x", by=bob)
    services.update_run_labels(r1, by=bob, display_name="First try", pinned=True)
    services.save_note(r1, body="Diverged at step 3. #approach: smaller lr", by=bob)
    services.add_comment(run=r1, by=bob, body="@alice look at this")
    services.delete_comment(services.add_comment(run=r1, by=bob, body="oops"), by=bob)
    services.add_comment(submission=best, by=alice, body="approved, *nice*")
    services.save_view(project, by=bob, name="by lr", query="col=param%3Alr&sort=-best", shared=True)
    logs.append_lines(
        r1,
        "b-1",
        [
            {
                "text": "step 3: loss nan",
                "level": "warning",
                "ts": "2026-01-01T00:00:03Z",
                "stream": "stderr",
            },
            "ok",
        ],
    )
    # Start the next run: a launch from r1 that became r1-next-1 (its parent is r1), and one still open.
    started, _ = launches.request_launch(
        project,
        by=bob,
        from_run=r1,
        kickoff="## Carry-forward: hill\n\nTry smaller steps.",
        model_profile="codex_medium",
        budget_usd="2.5",
        budget_tokens=10_000,
        idempotency_key="rich-launch-1",
    )
    dispatched.start_attempt(RunLaunch, started.pk)
    launches.record_accepted(started.pk, external_run_id=started.external_run_id, detail="HTTP 200")
    ingest(project, started.external_run_id, {"type": "state", "id": "n1", "state": "running", "ts": at(20)})
    launches.request_launch(project, by=alice, kickoff="An open launch", idempotency_key="rich-launch-2")
    # The spend guard paused r1-next-1 (its pause and the episode that names it; the announcement).
    services.update_project(
        project, by=alice, spend_stop="pause", spend_stop_turns=1, day_zone="Europe/Paris"
    )
    ingest(
        project,
        started.external_run_id,
        *[{"type": "agent.turn", "turn": n, "ts": at(21 + n)} for n in (1, 2)],
    )
    assert (
        guards.guard_spend(Run.objects.get(external_id=started.external_run_id), guards.Acted()) is not None
    )
    project.refresh_from_db()
    return project


# --- a canonical dump, written apart from the code under test ----------------------------------------

SCOPES = {
    Scenario: lambda p: Scenario.objects.filter(projects=p),
    Project: lambda p: Project.objects.filter(pk=p.pk),
    SourceHealth: lambda p: SourceHealth.objects.filter(project=p),
    Membership: lambda p: Membership.objects.filter(project=p),
    ApiToken: lambda p: ApiToken.objects.filter(project=p),
    ProjectInvitation: lambda p: ProjectInvitation.objects.filter(project=p),
    Run: lambda p: Run.objects.filter(project=p),
    StateChange: lambda p: StateChange.objects.filter(run__project=p),
    Experiment: lambda p: Experiment.objects.filter(run__project=p),
    MetricPoint: lambda p: MetricPoint.objects.filter(run__project=p),
    AgentTurn: lambda p: AgentTurn.objects.filter(run__project=p),
    TurnBody: lambda p: TurnBody.objects.filter(run__project=p),
    Checkpoint: lambda p: Checkpoint.objects.filter(run__project=p),
    RuntimeMessage: lambda p: RuntimeMessage.objects.filter(run__project=p),
    ArtifactBlob: lambda p: ArtifactBlob.objects.filter(artifacts__run__project=p).distinct(),
    Artifact: lambda p: Artifact.objects.filter(run__project=p),
    Submission: lambda p: Submission.objects.filter(project=p),
    SubmissionTransition: lambda p: SubmissionTransition.objects.filter(submission__project=p),
    Review: lambda p: Review.objects.filter(submission__project=p),
    ArenaResult: lambda p: ArenaResult.objects.filter(submission__project=p),
    Rollback: lambda p: Rollback.objects.filter(run__project=p),
    KnowledgeEntry: lambda p: KnowledgeEntry.objects.filter(project=p),
    AuditEvent: lambda p: AuditEvent.objects.filter(project=p),
    RunSnooze: lambda p: RunSnooze.objects.filter(run__project=p),
    LoopFinding: lambda p: LoopFinding.objects.filter(run__project=p),
    AlertRule: lambda p: AlertRule.objects.filter(project=p),
    RunTag: lambda p: RunTag.objects.filter(run__project=p),
    RunParam: lambda p: RunParam.objects.filter(run__project=p),
    RunLogLine: lambda p: RunLogLine.objects.filter(run__project=p),
    RunLogBatch: lambda p: RunLogBatch.objects.filter(run__project=p),
    RunNote: lambda p: RunNote.objects.filter(run__project=p),
    Comment: lambda p: Comment.objects.filter(project=p),
    SavedView: lambda p: SavedView.objects.filter(project=p),
    ShareLink: lambda p: ShareLink.objects.filter(project=p),
    RunControl: lambda p: RunControl.objects.filter(run__project=p),
    RunLaunch: lambda p: RunLaunch.objects.filter(project=p),
    Notification: lambda p: Notification.objects.filter(
        Q(rule__project=p) | Q(comment__project=p) | Q(project=p)
    ),
    GuardEpisode: lambda p: GuardEpisode.objects.filter(run__project=p),
}
# Not compared: the slug (import chooses it), where the bytes are stored, a worker's polling lease, a
# launch's idempotency key (re-keyed when the original holds it: checked apart).
NOT_COMPARED = {
    Project: {"slug"},
    RunLaunch: {"idempotency_key"},
    ArtifactBlob: {"storage_name"},
    SourceHealth: {"lease_until", "lease_owner"},
}
AUDITED = {model.__name__.lower(): model for model in SCOPES}


def identity(obj):
    """What a row is, without its primary key."""
    if obj is None:
        return None
    if isinstance(obj, User):
        return obj.get_username()
    natural = {
        Project: lambda: "<project>",
        Scenario: lambda: obj.key,
        Run: lambda: obj.external_id,
        Experiment: lambda: (obj.run.external_id, obj.external_id),
        Checkpoint: lambda: (obj.run.external_id, obj.external_id),
        Submission: lambda: (obj.run.external_id, obj.event_id),
        Artifact: lambda: (obj.run.external_id, obj.path, obj.blob.sha256),
        ArtifactBlob: lambda: obj.sha256,
        Membership: lambda: obj.user.get_username(),
        ApiToken: lambda: obj.token_hash,
        ShareLink: lambda: obj.token_hash,
    }.get(type(obj))
    return (
        natural()
        if natural
        else json.dumps(
            row_of(obj, obj.project if hasattr(obj, "project") else None), sort_keys=True, default=str
        )
    )


def row_of(obj, project) -> dict:
    row = {}
    for f in type(obj)._meta.concrete_fields:
        if f.primary_key or f.name in NOT_COMPARED.get(type(obj), ()):
            continue
        row[f.name] = identity(getattr(obj, f.name)) if f.is_relation else f.value_from_object(obj)
    if isinstance(obj, TurnBody):  # its turn is its primary key: compared by what the turn is
        row["turn"] = (obj.turn.run.external_id, obj.turn.event_id)
    if isinstance(obj, AuditEvent):
        model = AUDITED.get(obj.object_type)
        named = (
            SCOPES[model](project).filter(pk=int(obj.object_id)).first() if model and obj.object_id else None
        )
        row["object_id"] = identity(named) if named else obj.object_id
    return row


def canonical(project) -> dict[str, list[dict]]:
    return {
        model.__name__: sorted(
            (row_of(obj, project) for obj in scope(project)),
            key=lambda row: json.dumps(row, sort_keys=True, default=str),
        )
        for model, scope in SCOPES.items()
    }


def blob_bytes(project) -> dict[str, bytes]:
    found = {}
    for artifact in Artifact.objects.filter(run__project=project).select_related("blob"):
        with services.open_blob(artifact.blob) as fh:
            found[artifact.blob.sha256] = fh.read()
    return found


def everything() -> dict[str, int]:
    return {model.__name__: model.objects.count() for model in [*SCOPES, User]}


def empty_database() -> None:
    """`flush` inside the test's transaction; PostgreSQL first runs the foreign-key checks it deferred
    (TRUNCATE refuses tables with pending ones)."""
    postgres = connection.vendor == "postgresql"
    if postgres:
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    call_command("flush", interactive=False, verbosity=0)
    if postgres:
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL DEFERRED")


def stored_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def rewrite(
    src: Path, dst: Path, *, replace=None, add=None, drop=(), fix_manifest=False, edit_manifest=None
) -> Path:
    """A copy of an archive with members replaced (bytes, or a function of the old bytes), added or
    dropped; `fix_manifest` makes the manifest agree with the new bytes, as a careful forger would."""
    replace, add = replace or {}, add or {}
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        manifest = json.loads(zin.read(backup.MANIFEST))
        for name in zin.namelist():
            if name == backup.MANIFEST or name in drop:
                continue
            data = zin.read(name)
            if name in replace:
                data = replace[name](data) if callable(replace[name]) else replace[name]
                if fix_manifest:
                    manifest["files"][name] = {"sha256": sha(data), "size": len(data)}
            zout.writestr(name, data)
        for name, data in add.items():
            zout.writestr(name, data)
        if edit_manifest:
            edit_manifest(manifest)
        zout.writestr(backup.MANIFEST, json.dumps(manifest))
    return dst


def test_every_tracking_model_has_a_decision():
    # A model added to tracking without deciding how it is backed up fails here.
    models = set(apps.get_app_config("tracking").get_models()) - set(backup.tables.INSTANCE)
    assert models == set(SCOPES) | set(backup.tables.DERIVED)
    assert {table.model for table in backup.TABLES} | set(backup.tables.DERIVED) == models
    assert not set(SCOPES) & set(backup.tables.DERIVED)


# --- round trips ------------------------------------------------------------------------------------


def test_a_rich_project_round_trips_under_a_new_slug_field_by_field(rich, tmp_path):
    before, bytes_before, users_before = canonical(rich), blob_bytes(rich), User.objects.count()
    blobs_before = ArtifactBlob.objects.count()
    manifest = backup.export_project(rich, tmp_path / "hill.zip")
    assert manifest["counts"]["metric_point"] == 25 and manifest["counts"]["artifact_blob"] == 3
    assert manifest["counts"]["user"] == 4  # alice, bob, victor, dora
    assert manifest["counts"]["turn_body"] == 1 and before["TurnBody"][0]["turn"] == ("r1", "t1")

    result = backup.import_project(tmp_path / "hill.zip", slug="hill-copy", trust=True)

    copy = result.project
    assert copy.slug == "hill-copy" and copy.pk != rich.pk
    after = canonical(copy)
    # Token hashes are unique here and the original still holds them: left out, and said so.
    assert after.pop("ApiToken") == [] and len(before.pop("ApiToken")) == 2
    assert after.pop("ShareLink") == [] and len(before.pop("ShareLink")) == 2  # share links: the same
    assert (
        result.warnings[0]
        == "restored memberships (--trust): alice admin, bob reviewer, victor viewer, dora viewer"
    )
    assert [w.split("'")[1] for w in result.warnings[1:3]] == ["ci", "old"]
    # Launch keys are unique here too: the copies get a suffix, and the import says so.
    assert result.warnings[3].startswith("2 launch(es) got a new idempotency key")
    assert [w.split(" (")[0][:10] for w in result.warnings[4:6]] == ["Share link"] * 2
    assert sorted(RunLaunch.objects.filter(project=copy).values_list("idempotency_key", flat=True)) == [
        f"rich-launch-1-restored-{copy.pk}",
        f"rich-launch-2-restored-{copy.pk}",
    ]
    for row in before["AuditEvent"]:
        if row["verb"].startswith(("token.", "share_link.")):
            row["object_id"] = ""  # the token or share link it named was not restored
    before["AuditEvent"].sort(key=lambda row: json.dumps(row, sort_keys=True, default=str))
    for model in before:
        assert after[model] == before[model], model
    assert result.created_users == [] and User.objects.count() == users_before
    assert ArtifactBlob.objects.count() == blobs_before  # the same bytes are the same blobs
    assert blob_bytes(copy) == bytes_before
    assert all(sha(data) == digest for digest, data in blob_bytes(copy).items())
    health = SourceHealth.objects.get(project=copy)
    assert health.lease_until is None and health.lease_owner == ""
    assert reveal(copy.source_settings["api_key_sealed"]) == "sk-secret"
    # What people wrote came along, the mention in alice's inbox pointing at the copy's comment.
    mention = Notification.objects.get(kind="mention", comment__project=copy)
    assert mention.recipient.username == "alice" and mention.comment.body == "@alice look at this"
    assert Run.objects.get(project=copy, external_id="r1").display_name == "First try"
    # Lineage: the copy's next run comes from the copy's r1, and its launch names both.
    child = Run.objects.get(project=copy, external_id="r1-next-1")
    assert child.parent == Run.objects.get(project=copy, external_id="r1")
    confirmed = RunLaunch.objects.get(project=copy, status="confirmed")
    assert confirmed.run == child and confirmed.from_run == child.parent
    assert RunTag.objects.filter(run__project=copy).count() == 2
    audit = AuditEvent.objects.get(verb="project.imported")
    assert (
        audit.project is None and audit.object_id == str(copy.pk) and audit.detail["archived_slug"] == "hill"
    )


def test_a_rich_project_round_trips_into_an_emptied_database(rich, tmp_path, artifact_root):
    before, bytes_before = canonical(rich), blob_bytes(rich)
    emails = dict(User.objects.values_list("username", "email"))
    backup.export_project(rich, tmp_path / "a.zip")
    raw_token = rich.raw_token
    empty_database()
    assert not Project.objects.exists() and not Scenario.objects.exists() and not User.objects.exists()

    result = backup.import_project(tmp_path / "a.zip", trust=True)

    restored = result.project
    assert restored.slug == "hill" and result.warnings == [
        "restored memberships (--trust): alice admin, bob reviewer, victor viewer, dora viewer"
    ]
    assert canonical(restored) == before
    assert blob_bytes(restored) == bytes_before
    # Users that did not exist are created inactive, with no usable password, keeping their names.
    assert result.created_users == ["alice", "bob", "dora", "victor"]
    for user in User.objects.all():
        assert not user.is_active and not user.has_usable_password() and not user.is_staff
        assert user.email == emails[user.username]
    assert User.objects.get(username="dora").get_full_name() == "Dora Explorer"
    # Token hashes came back, so the harness's token keeps working against the restored project.
    assert services.authenticate_token(raw_token).project == restored
    # Nothing held the launch keys here: they came back as they were, with the lineage.
    assert sorted(RunLaunch.objects.values_list("idempotency_key", flat=True)) == [
        "rich-launch-1",
        "rich-launch-2",
    ]
    assert Run.objects.get(external_id="r1-next-1").parent.external_id == "r1"

    # Exporting the restored project gives the same archive, byte for byte (but the export time).
    backup.export_project(restored, tmp_path / "b.zip")
    with zipfile.ZipFile(tmp_path / "a.zip") as a, zipfile.ZipFile(tmp_path / "b.zip") as b:
        assert sorted(a.namelist()) == sorted(b.namelist())
        for name in a.namelist():
            if name != backup.MANIFEST:
                assert a.read(name) == b.read(name), name
        manifest_a, manifest_b = json.loads(a.read(backup.MANIFEST)), json.loads(b.read(backup.MANIFEST))
        assert manifest_a.pop("exported_at") != "" and manifest_b.pop("exported_at") != ""
        assert manifest_a == manifest_b


def test_an_empty_project_round_trips(tmp_path):
    bare = services.create_project("bare")  # no members, no runs, no scenario of its own
    before = canonical(bare)
    manifest = backup.export_project(bare, tmp_path / "bare.zip")
    assert manifest["counts"] == {
        **dict.fromkeys(manifest["counts"], 0),
        "scenario": 1,
        "project": 1,
        "audit_event": 1,
    }
    copy = backup.import_project(tmp_path / "bare.zip", slug="bare2").project
    assert canonical(copy) == before
    assert copy.scenario == bare.scenario  # the same definition: the existing scenario is used


def test_big_tables_are_inserted_in_chunks_not_row_by_row(alice, tmp_path, django_assert_max_num_queries):
    project = admin_project("many", by=alice)
    ingest(project, "r", *[{"type": "metric", "key": "k", "value": i, "step": i} for i in range(300)])
    backup.export_project(project, tmp_path / "many.zip")
    # Chunks of 3 (small_chunks): 100 INSERTs for the metric points, a few queries for the rest (the
    # overview's figures and the run's metric rollups rebuilt once each: a fixed number).
    with django_assert_max_num_queries(300 // 3 + 36):
        copy = backup.import_project(tmp_path / "many.zip", slug="many2").project
    values = MetricPoint.objects.filter(run__project=copy).order_by("step").values_list("value", flat=True)
    assert list(values) == list(range(300))


def test_an_export_of_damaged_storage_fails_and_leaves_no_file(rich, tmp_path):
    blob = ArtifactBlob.objects.get(sha256=sha(SHARED))
    with services.artifact_storage().open(blob.storage_name, "wb") as fh:
        fh.write(SHARED[:-1] + b"?")
    with pytest.raises(BackupError, match=f"blob {blob.sha256} .* do not match its digest"):
        backup.export_project(rich, tmp_path / "hill.zip")
    assert list(tmp_path.glob("hill.zip*")) == []


# --- refusals: nothing written -----------------------------------------------------------------------


@pytest.fixture
def archive(rich, tmp_path):
    backup.export_project(rich, tmp_path / "hill.zip")
    return tmp_path / "hill.zip"


def refused(path, artifact_root, match: str, **options) -> BackupError:
    counts, files = everything(), stored_files(artifact_root)
    with pytest.raises(BackupError, match=match) as caught:
        backup.import_project(path, **options)
    assert everything() == counts and stored_files(artifact_root) == files
    return caught.value


def test_a_tampered_blob_is_refused_with_nothing_written(archive, tmp_path, artifact_root):
    name = f"blobs/{sha(SHARED)}"
    tampered = rewrite(archive, tmp_path / "t.zip", replace={name: lambda b: b[:-1] + b"!"})
    error = refused(tampered, artifact_root, "does not match its sha256", slug="copy")
    assert name in error.message


def test_a_blob_whose_manifest_entry_was_forged_to_match_is_still_refused(archive, tmp_path, artifact_root):
    tampered = rewrite(
        archive, tmp_path / "t.zip", replace={f"blobs/{sha(SHARED)}": b"other bytes"}, fix_manifest=True
    )
    refused(tampered, artifact_root, "not named by the sha256 of its bytes", slug="copy")


def test_a_tampered_row_is_refused(archive, tmp_path, artifact_root):
    tampered = rewrite(
        archive,
        tmp_path / "t.zip",
        replace={"data/submission.jsonl": lambda b: b.replace(b'"score":0.9', b'"score":1.0')},
    )
    refused(tampered, artifact_root, "data/submission.jsonl does not match its sha256", slug="copy")


def test_members_missing_or_not_listed_are_refused(archive, tmp_path, artifact_root):
    refused(
        rewrite(archive, tmp_path / "m.zip", drop=[f"blobs/{sha(SHARED)}"]),
        artifact_root,
        "missing blobs/",
        slug="copy",
    )
    refused(
        rewrite(archive, tmp_path / "x.zip", add={"data/extra.jsonl": b"{}\n"}),
        artifact_root,
        "not listed data/extra.jsonl",
        slug="copy",
    )
    (tmp_path / "junk.zip").write_bytes(b"not a zip")
    refused(tmp_path / "junk.zip", artifact_root, "not a readable archive", slug="copy")


def test_an_unknown_format_version_is_refused(archive, tmp_path, artifact_root):
    newer = rewrite(archive, tmp_path / "v2.zip", edit_manifest=lambda m: m.update(version=2))
    refused(newer, artifact_root, "format version 2; this smrweb reads version 1", slug="copy")


def test_an_existing_slug_is_refused_unless_a_new_one_is_given(archive, artifact_root, other_project):
    refused(archive, artifact_root, r"'hill' already exists here; .*\(--as NEWSLUG\)")
    refused(archive, artifact_root, "'other' already exists", slug="other")
    refused(archive, artifact_root, "not a slug", slug="no spaces")
    assert backup.import_project(archive, slug="hill-2").project.slug == "hill-2"


def test_a_failure_halfway_rolls_back_every_row_and_deletes_the_blobs_it_stored(
    archive, artifact_root, monkeypatch
):
    empty_database()  # so that the import stores the bytes anew
    counts, files = everything(), stored_files(artifact_root)

    def fail(*args, **kwargs):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(services, "record_audit", fail)  # the import's last write
    with pytest.raises(RuntimeError):
        backup.import_project(archive)
    assert everything() == counts and stored_files(artifact_root) == files


def test_a_row_pointing_at_nothing_is_refused_after_blobs_were_stored(archive, tmp_path, artifact_root):
    empty_database()

    def dangling(data: bytes) -> bytes:
        rows = [json.loads(line) for line in data.splitlines()]
        rows[-1]["run"] = 999
        return b"".join(json.dumps(row).encode() + b"\n" for row in rows)

    broken = rewrite(
        archive, tmp_path / "d.zip", replace={"data/submission.jsonl": dangling}, fix_manifest=True
    )
    refused(broken, artifact_root, r"data/submission.jsonl line \d+: run points at 999")


def test_a_scenario_that_differs_here_is_refused_and_can_be_restored_under_a_new_key(archive, artifact_root):
    Scenario.objects.filter(key="bench").update(direction="minimize", score_max=2.0)
    refused(
        archive,
        artifact_root,
        "'bench' exists here with a different direction, score_max; .*--scenario-as",
        slug="copy",
    )
    copy = backup.import_project(archive, slug="copy", scenario_key="bench-v1", trust=True).project
    assert copy.scenario.key == "bench-v1"
    assert (copy.scenario.direction, copy.scenario.score_max, copy.scenario.validator_command) == (
        "maximize",
        1.0,
        ["python", "{artifact}"],
    )


def test_an_untrusted_archive_restores_no_command_and_no_sharing_of_its_scenario(archive, tmp_path):
    """Finding N7: an archive's scenario came back with `validator_command ["python3", "{artifact}"]` and
    `shared: true`, said nothing, and any user with add_project could attach it. Untrusted, a new
    scenario is restored without its commands and unshared, and the import says so; `--trust` restores
    them; an existing scenario of the key keeps this server's own definition."""
    shared = rewrite(
        archive,
        tmp_path / "s.zip",
        fix_manifest=True,
        replace={
            "data/scenario.jsonl": lambda b: json.dumps({**json.loads(b), "shared": True}).encode() + b"\n"
        },
    )
    result = backup.import_project(shared, slug="imp-meta", scenario_key="imp-exec")
    scenario = Scenario.objects.get(key="imp-exec")
    assert (scenario.validator_command, scenario.scoring_command, scenario.shared) == ([], [], False)
    assert result.project.scenario == scenario
    [warning] = [w for w in result.warnings if "scenario" in w]
    assert "'imp-exec' restored without its validator_command, scoring_command, shared" in warning
    assert "--trust" in warning

    trusted = backup.import_project(shared, slug="imp-trusted", scenario_key="imp-exec-2", trust=True)
    assert (
        trusted.project.scenario.validator_command,
        trusted.project.scenario.scoring_command,
        trusted.project.scenario.shared,
    ) == (["python", "{artifact}"], ["score", "{artifact}"], True)

    Scenario.objects.filter(key="bench").update(validator_command=["local-validator"], shared=False)
    kept = backup.import_project(shared, slug="imp-onto-bench").project.scenario
    assert (kept.key, kept.validator_command, kept.shared) == ("bench", ["local-validator"], False)


def test_a_key_sealed_by_another_deployment_is_left_out_with_a_warning(archive, settings):
    settings.SECRET_KEY = "another deployment's secret key"
    result = backup.import_project(archive, slug="copy", trust=True)
    assert "api_key_sealed" not in result.project.source_settings
    assert result.project.source_settings["backend_base"] == "https://smr.example.com"
    assert any("sealed with another SECRET_KEY" in w for w in result.warnings)


# --- consistency while ingest goes on ----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_export_reads_one_snapshot_while_ingest_goes_on(alice, tmp_path, monkeypatch):
    project = admin_project("live", by=alice)
    ingest(project, "r1", {"type": "agent.turn", "id": "t1", "turn": 1, "tokens_in": 5, "cost_usd": 0.5})
    write_table, errors = backup._Exporter._write_table, []

    def late_turn():
        try:
            ingest(
                Project.objects.get(slug="live"),
                "r1",
                {"type": "agent.turn", "id": "t2", "turn": 2, "tokens_in": 7, "cost_usd": 0.25},
            )
        except Exception as exc:  # noqa: BLE001 — handed to the test's thread
            errors.append(exc)
        finally:
            connection.close()

    def write_then_ingest(self, table):
        write_table(self, table)
        if table.name == "run":  # the run's summary is in the archive: now another turn arrives
            thread = threading.Thread(target=late_turn)
            thread.start()
            thread.join(timeout=60)

    monkeypatch.setattr(backup._Exporter, "_write_table", write_then_ingest)
    backup.export_project(project, tmp_path / "live.zip")

    assert (
        errors == [] and AgentTurn.objects.filter(run__project=project).count() == 2
    )  # ingest was not blocked
    with zipfile.ZipFile(tmp_path / "live.zip") as zf:
        [run] = [json.loads(line) for line in zf.read("data/run.jsonl").splitlines()]
        turns = zf.read("data/agent_turn.jsonl").splitlines()
    assert run["turn_count"] == len(turns) == 1 and run["cost_usd"] == "0.500000"


# --- the commands ------------------------------------------------------------------------------------


def test_the_commands_export_and_import(rich, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    call_command("export_project", "hill", stdout=out)
    [path] = tmp_path.glob("hill-*.smrweb.zip")
    assert f"exported hill to {path.name}: " in out.getvalue() and "25 metric_point" in out.getvalue()
    with pytest.raises(CommandError, match="already exists"):
        call_command("export_project", "hill", "-o", str(path))
    with pytest.raises(CommandError, match="No project 'nope'"):
        call_command("export_project", "nope")
    with pytest.raises(CommandError, match="already exists here"):
        call_command("import_project", str(path))

    out, err = io.StringIO(), io.StringIO()
    call_command("import_project", str(path), "--as", "hill2", "--trust", stdout=out, stderr=err)
    assert "imported project hill2: " in out.getvalue() and "25 metric_point" in out.getvalue()
    assert "warning: API token 'ci'" in err.getvalue()
    assert Project.objects.get(slug="hill2").runs.count() == 3

    Scenario.objects.filter(key="bench").update(name="renamed")
    with pytest.raises(CommandError, match="--scenario-as"):
        call_command("import_project", str(path), "--as", "hill3")
    call_command(
        "import_project", str(path), "--as", "hill3", "--scenario-as", "bench-old", stdout=io.StringIO()
    )
    assert Project.objects.get(slug="hill3").scenario.name == "Bench"
    assert not list(tmp_path.glob("*.partial"))


# --- an archive is input (red-team finding 5) ----------------------------------------------------------


def test_an_untrusted_archive_restores_no_token_membership_address_or_key(archive, artifact_root):
    result = backup.import_project(archive, slug="copy")
    copy = result.project
    assert not ApiToken.objects.filter(project=copy).exists()
    assert not Membership.objects.filter(project=copy).exists()
    assert copy.rollback_webhook_url == "" and not {"backend_base", "api_key_sealed"} & set(
        copy.source_settings
    )
    assert any("left out backend_base, api_key_sealed, rollback_webhook_url" in w for w in result.warnings)
    assert any("2 api token row(s) were not restored" in w for w in result.warnings)
    assert any("membership row(s) were not restored" in w for w in result.warnings)
    assert (
        Submission.objects.filter(project=copy).count()
        == Submission.objects.filter(project__slug="hill").count()
    )
    # Comments, notes and tags are project data: always carried; the mentions (inbox rows) are not.
    assert Comment.objects.filter(project=copy).count() == 3 and RunNote.objects.filter(run__project=copy)
    assert RunTag.objects.filter(run__project=copy).count() == 2
    assert not Notification.objects.filter(comment__project=copy).exists()


def test_an_untrusted_archive_binds_no_repository_on_this_servers_disk(archive, tmp_path):
    """Red-team N3 through an archive: a project row naming another team's repository (and a pin for it)
    would have this server read it. Untrusted, the path and the pin are left out, and said so."""

    def pointed(data: bytes) -> bytes:
        row = json.loads(data)
        row["git_repo_path"] = "/srv/other-team/repo"
        row["source_settings"] = {
            **(row["source_settings"] or {}),
            "git_pin": {"path": "/srv/other-team/repo"},
        }
        return json.dumps(row).encode() + b"\n"

    forged = rewrite(archive, tmp_path / "g.zip", fix_manifest=True, replace={"data/project.jsonl": pointed})
    result = backup.import_project(forged, slug="copy")
    assert result.project.git_repo_path == "" and "git_pin" not in result.project.source_settings
    assert any("git_repo_path" in w and "--trust" in w for w in result.warnings)
    trusted = backup.import_project(forged, slug="copy2", trust=True).project
    assert (
        trusted.git_repo_path == "/srv/other-team/repo"
    )  # the operator's choice; the pin is checked at sync


def test_a_trusted_archive_still_passes_the_outbound_guard(archive, tmp_path, artifact_root, settings):
    settings.SMRWEB_WEBHOOK_ALLOWED_HOSTS = ["hooks.example.com"]  # the webhook is fine; the backend is not
    pointed = rewrite(
        archive,
        tmp_path / "p.zip",
        fix_manifest=True,
        replace={
            "data/project.jsonl": lambda b: b.replace(b"https://smr.example.com", b"http://169.254.169.254")
        },
    )
    error = refused(pointed, artifact_root, "backend_base", slug="copy", trust=True)
    assert "169.254.169.254 is a link-local address" in error.message


def test_a_blob_over_the_artifact_cap_is_refused_before_it_is_unpacked(archive, artifact_root, settings):
    settings.SMRWEB_MAX_ARTIFACT_BYTES = 8
    refused(archive, artifact_root, r"artifacts are limited to 8 \(SMRWEB_MAX_ARTIFACT_BYTES\)", slug="copy")


def test_a_zip_bomb_member_is_refused_before_it_is_unpacked(archive, tmp_path, artifact_root):
    zeros = bytes(32 * 1024 * 1024)
    name = f"blobs/{sha(zeros)}"
    bomb = rewrite(
        archive,
        tmp_path / "bomb.zip",
        add={name: zeros},
        edit_manifest=lambda m: m["files"].update({name: {"sha256": sha(zeros), "size": len(zeros)}}),
    )
    refused(bomb, artifact_root, "unpacks to 33554432 bytes from .* more than 200× is refused", slug="copy")


def test_an_archive_over_the_project_quota_is_refused(archive, artifact_root, settings):
    settings.SMRWEB_PROJECT_STORAGE_QUOTA_BYTES = 10
    refused(archive, artifact_root, "over a project's storage quota of 10", slug="copy")
