"""The permission matrix (issue 7): every URL pattern of the site — page, htmx partial, API endpoint and
action — tried by every kind of caller, with the expected answer written down per cell.

Callers (columns, in this order):
  anon     no session, no token
  carol    signed in, member of nothing (an outsider)
  victor   viewer of "hill"
  bob      reviewer of "hill"
  alice    admin of "hill"
  token    a valid project token of "hill" (the harness)
  other    a valid token of another project ("other")
  revoked  a revoked token of "hill"

Answers (cells):
  ALLOW  the row's success status (`ok`); for an action, its effect happened; for a read, the row's marker
         (data only a reader of hill can have) is in the body; for an htmx row, the answer is a fragment
  LOGIN  pages: 302 to /login/; API: 401
  DENY   403
  HIDE   404 (an outsider must not learn that the project exists)
  EMPTY  200 without the row's marker (lists filtered to what the caller may see)
  <n>    exactly that status (e.g. 204 for an unchanged poll, 410 for an expired link)

Every cell also checks that nothing else happened: apart from an ALLOWed action's own effect, the
database's fingerprint (statuses, counts, settings, the audit trail) is unchanged; no answer to someone
who may not read hill shows hill's secrets (but a signed link's own bytes), no LOGIN or HIDE answer
shows them to anyone, and no answer shows the other project's secrets to someone outside it.

One world for the module (built once, in a transaction rolled back at the end); one test per row, in
a savepoint; each cell in one more savepoint that is rolled back, so every caller meets the same world
and an allowed action by one caller cannot hide a refused one by the next. Celery tasks are queued on
commit, which never comes, so no worker is needed; the scenario preflight's worker round trip is faked.

`test_every_url_pattern_has_a_row` fails when a URL pattern has no row (so a new endpoint without a
matrix row breaks this file), `test_every_htmx_endpoint_in_the_templates_has_an_hx_row` when a template
fetches a URL with htmx that no row requests as htmx.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import time_machine
from django.core.cache import caches
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection, transaction
from django.test import override_settings
from django.urls import URLPattern, URLResolver, get_resolver, resolve
from django.utils import timezone
from rest_framework.test import APIClient

from smrweb import tasks
from smrweb.dashboard import live
from smrweb.dashboard.artifacts import signed_artifact_path, signed_bundle_path
from smrweb.dashboard.models import UserPreference
from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import (
    AlertRule,
    ApiToken,
    ArenaResult,
    Artifact,
    AuditEvent,
    Checkpoint,
    Comment,
    KnowledgeEntry,
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
    RunLogLine,
    RunNote,
    RunParam,
    RunSnooze,
    RunTag,
    SavedView,
    Scenario,
    ShareLink,
    Submission,
    SubmissionTransition,
    Verdict,
    VerificationOutcome,
)
from smrweb.tracking.services import handoff, knowledge, launches, logs
from smrweb.tracking.services import submissions as lifecycle
from tests.conftest import TEST_ALLOWED_HOSTS
from tests.factories import UserFactory, admin_project

ROOT = Path(__file__).resolve().parent.parent
PRINCIPALS = ("anon", "carol", "victor", "bob", "alice", "token", "other", "revoked")
HILL_READERS = ("victor", "bob", "alice", "token")

# --- the world's secrets: what only a reader of each project may ever see ------------------------------

PROJECT_NAME = "Hill climb 3b7e"
SCENARIO_KEY = "hillclimb-matrix"
SCENARIO_NAME = "Hill scenario 5d21"
RUN = "run-7f3a9c"
MODEL = "model-9e4b17"
ARTIFACT_PATH = "submission/secret-8c2d.py"
ARTIFACT_BYTES = b"ARTIFACT-BYTES-41f0 print('hill')\n"
KNOWLEDGE_TITLE = "Wide MLP 6a0c"
WEBHOOK = "https://hooks.example/hill-rollback-2e9f"
TOKEN_NAME = "ci-harness-c1d8"
ALERT_WEBHOOK = "https://hooks.example/hill-alert-6b3d"
LAUNCH_KICKOFF = "Launch kickoff 5c9a"
TAG_KEY = "sweep-5e8a"
NOTE_TEXT = "Note 4c1e: diverged"
COMMENT_TEXT = "Comment 9d2a on the run"
LOG_TEXT = "Log line 3e7b of the run"
SUB_COMMENT_TEXT = "Comment 71bf on a submission"
VIEW_NAME = "Shared view 2b9d"
HILL_SECRETS = (
    VIEW_NAME,
    LAUNCH_KICKOFF,
    PROJECT_NAME,
    RUN,
    MODEL,
    ARTIFACT_PATH,
    ARTIFACT_BYTES.decode(),
    KNOWLEDGE_TITLE,
    WEBHOOK,
    TOKEN_NAME,
    ALERT_WEBHOOK,
    TAG_KEY,
    NOTE_TEXT,
    COMMENT_TEXT,
    SUB_COMMENT_TEXT,
    LOG_TEXT,
)

INVITEE = "invitee-3c1f@example.org"  # the address of hill's pending invitation: none of the callers has it
SILENT_RUN = "run-silent-4d2e"  # a run of hill whose harness went silent: a reviewer may close it
DONE_RUN = "run-done-8b1c"  # a finished run of hill without artifacts: it may be archived and deleted

OTHER_NAME = "Other project 0c4a"
OTHER_RUN = "orun-52b1"
OTHER_BYTES = b"OTHER-BYTES-93de\n"
OTHER_TITLE = "Other entry 77e3"
OTHER_MODEL = "omodel-1a6f"
OTHER_COMMENT = "Other comment 3f7b"
OTHER_SECRETS = (
    OTHER_NAME,
    OTHER_MODEL,
    OTHER_BYTES.decode(),
    OTHER_TITLE,
    OTHER_COMMENT,
    "/projects/other/",
)


# --- the world ------------------------------------------------------------------------------------------


@dataclass
class World:
    ids: dict[str, Any]
    users: dict[str, Any]
    raw: dict[str, str]  # principal -> raw bearer token
    preflights: list[str] = field(default_factory=list)  # scenario keys the fake worker was asked about
    artifact_root: Path | None = None
    clients: dict[str, APIClient] = field(default_factory=dict)


def _events(project, run_id: str, events: list[dict]) -> None:
    services.ingest_events(project, run_id, parse_events(json.dumps(events)))


PREFLIGHT_ID = "e" * 32  # a preflight of the world's scenario whose report a worker has stored


def _fake_preflight(calls: list[str]):
    """The worker's side: asking records the call; reading answers the stored report."""

    def request_preflight(key: str) -> str:
        calls.append(key)
        return PREFLIGHT_ID

    def preflight_state(key: str, request_id: str) -> dict | None:
        if request_id != PREFLIGHT_ID:
            return None
        return {
            "scenario": key,
            "status": "done",
            "report": {
                "scenario": key,
                "ok": True,
                "worker": "matrix-worker",
                "checks": [{"name": "validator", "group": "worker", "ok": True, "detail": "`python3` found"}],
            },
        }

    return request_preflight, preflight_state


def build_world() -> World:
    users = {name: UserFactory(username=name) for name in ("alice", "bob", "victor", "carol")}
    alice, bob = users["alice"], users["bob"]
    scenario = services.create_scenario(key=SCENARIO_KEY, name=SCENARIO_NAME, arena_name="dogfight")
    hill = admin_project("hill", name=PROJECT_NAME, scenario=scenario, by=alice)
    services.add_member(hill, bob, role=Role.REVIEWER)
    services.add_member(hill, users["victor"], role=Role.VIEWER)
    services.update_project(hill, rollback_webhook_url=WEBHOOK, by=alice)  # rollbacks are legal here

    artifact, _ = services.store_artifact(hill, RUN, path=ARTIFACT_PATH, content=io.BytesIO(ARTIFACT_BYTES))
    sha = artifact.blob.sha256
    _events(
        hill,
        RUN,
        [
            {"type": "state", "id": "s1", "state": "running", "ts": "2026-01-01T00:00:00Z"},
            {"type": "message", "id": "m1", "body": "kickoff", "ts": "2026-01-01T00:00:00Z"},
            {
                "type": "agent.turn",
                "id": "t0",
                "turn": 0,
                "model": MODEL,
                "tokens_in": 10,
                "tokens_out": 5,
                "cost_usd": 0.01,
                "ts": "2026-01-01T00:00:10Z",
            },
            # One turn of today: the spend by day (the last 30 days) shows its model.
            {"type": "agent.turn", "id": "t-now", "turn": 1, "model": MODEL, "tokens_in": 3, "tokens_out": 1},
            {"type": "metric", "id": "l0", "key": "loss", "value": 1.0, "step": 0},
            {"type": "metric", "id": "l1", "key": "loss", "value": 0.5, "step": 1},
            {"type": "checkpoint", "id": "cp-1", "label": "first", "ts": "2026-01-01T00:00:20Z"},
            *[
                {
                    "type": "score",
                    "id": f"sc{i}",
                    "score": 0.1 * (i + 1),
                    "artifact": sha,
                    "ts": f"2026-01-01T00:01:{i:02d}Z",
                }
                for i in range(5)
            ],
        ],
    )
    # One submission per step of the loop, so that every action is legal for someone allowed to take it.
    cand, verifying, verified, approved, uploaded = Submission.objects.filter(project=hill).order_by("score")
    for sub in (verifying, verified, approved, uploaded):
        lifecycle.request_verification(sub, by=bob)
    for sub in (verified, approved, uploaded):
        lifecycle.record_verification(
            sub.pk, lifecycle.VerificationResult(VerificationOutcome.PASSED, 0, "ok", "ok")
        )
    for sub in (approved, uploaded):
        lifecycle.review(Submission.objects.get(pk=sub.pk), by=alice, verdict=Verdict.APPROVE, comment="good")
    handoff.mark_uploaded(Submission.objects.get(pk=uploaded.pk), by=bob)
    entry = knowledge.add_entry(
        hill, by=bob, kind="failed_approach", title=KNOWLEDGE_TITLE, body="too big", submission=cand
    )
    with time_machine.travel(timezone.now() - hill.stall_after - timedelta(minutes=5), tick=False):
        _events(hill, SILENT_RUN, [{"type": "state", "id": "s1", "state": "running"}])
    _events(hill, DONE_RUN, [{"type": "state", "id": "d1", "state": "done"}])
    _, raw_token = services.create_api_token(hill, name=TOKEN_NAME, by=alice)
    # Alerts: a webhook rule (its target is a secret of hill), alice's inbox rule with a notification in her
    # inbox, and the run snoozed (so lifting the snooze has something to lift).
    rule = services.create_alert_rule(
        hill, by=alice, trigger="run.failed", channel="webhook", target=ALERT_WEBHOOK
    )
    note = services.send_test(
        services.create_alert_rule(hill, by=alice, trigger="run.stalled", channel="inbox", recipient="alice"),
        by=alice,
    )
    services.snooze_run(Run.objects.get(project=hill, external_id=RUN), by=bob, hours=1)
    # What people wrote: a tag, a note, bob's comments on the run and on a submission.
    hill_run = Run.objects.get(project=hill, external_id=RUN)
    services.set_tag(hill_run, key=TAG_KEY, value="warmup", by=bob)
    services.save_note(hill_run, by=bob, body=NOTE_TEXT)
    comment = services.add_comment(run=hill_run, by=bob, body=COMMENT_TEXT)
    logs.append_lines(hill_run, "matrix-world", [{"text": LOG_TEXT, "level": "warning"}])
    sub_comment = services.add_comment(submission=cand, by=bob, body=SUB_COMMENT_TEXT)
    # Saved views: bob's, shared with the project; victor's own (private).
    view = services.save_view(hill, by=bob, name=VIEW_NAME, query=f"tag={TAG_KEY}", shared=True)
    private_view = services.save_view(hill, by=users["victor"], name="mine", query=f"col=tag%3A{TAG_KEY}")
    spare, _ = services.create_api_token(hill, name="spare", by=alice)
    revoked, raw_revoked = services.create_api_token(hill, name="old", by=alice)
    services.revoke_api_token(revoked, by=alice)
    # Invitations: a pending one for an address none of the callers has, and one that expired.
    invitation = services.invite_member(hill, email=INVITEE, role=Role.VIEWER, by=alice)
    with time_machine.travel(timezone.now() - timedelta(days=60)):
        stale = services.invite_member(hill, email="stale-7d1e@example.org", role=Role.VIEWER, by=alice)
    invite_token = services.invitation_token(invitation)

    # Another project none of the callers belongs to, with data of its own (for cross-project ids).
    dave = UserFactory(username="dave")  # the other project's admin; not one of the callers
    other = admin_project("other", name=OTHER_NAME, by=dave)
    o_artifact, _ = services.store_artifact(other, OTHER_RUN, path="o.txt", content=io.BytesIO(OTHER_BYTES))
    _events(
        other,
        OTHER_RUN,
        [
            {"type": "agent.turn", "id": "t0", "turn": 0, "model": OTHER_MODEL, "ts": "2026-01-01T00:00:10Z"},
            {"type": "score", "id": "o1", "score": 0.9, "artifact": o_artifact.blob.sha256},
        ],
    )
    o_sub = Submission.objects.get(project=other)
    lifecycle.request_verification(o_sub, by=dave)
    lifecycle.record_verification(
        o_sub.pk, lifecycle.VerificationResult(VerificationOutcome.PASSED, 0, "ok", "ok")
    )
    o_entry = knowledge.add_entry(other, by=dave, kind="note", title=OTHER_TITLE)
    o_token, raw_other = services.create_api_token(other, name="other-ci")
    o_rule = services.create_alert_rule(
        other, by=dave, trigger="run.failed", channel="inbox", recipient="dave"
    )
    o_note = services.send_test(o_rule, by=dave)  # in dave's inbox; its title names the other project
    # Start the next run: one launch of hill (from its run) and one of the other project.
    launch, _ = launches.request_launch(
        hill,
        by=bob,
        from_run=Run.objects.get(project=hill, external_id=RUN),
        kickoff=f"{LAUNCH_KICKOFF}: halve the learning rate",
        idempotency_key="matrix-launch-hill-1",
    )
    services.update_project(other, rollback_webhook_url="https://hooks.example/other-start", by=dave)
    o_launch, _ = launches.request_launch(
        other, by=dave, kickoff="other kickoff", idempotency_key="matrix-launch-other-1"
    )
    o_comment = services.add_comment(run=Run.objects.get(project=other), by=dave, body=OTHER_COMMENT)
    o_view = services.save_view(other, by=dave, name="other view", query="state=running", shared=True)
    o_invitation = services.invite_member(other, email="o-invitee@example.org", role=Role.VIEWER, by=dave)

    artifact = Artifact.objects.select_related("blob", "run").get(pk=artifact.pk)
    valid = signed_artifact_path(artifact)
    with time_machine.travel(timezone.now() - timedelta(days=3)):
        expired = signed_artifact_path(artifact, ttl=timedelta(hours=1))
    tampered = valid[:-2] + ("A" if valid[-2] != "A" else "B") + "/"
    _, expiry, signature = valid.split("/")[2].split(".")
    # Well formed, no such id.
    unknown = f"/a/{Artifact.objects.order_by('-pk').first().pk + 1000}.{expiry}.{signature}/"
    # The bundle of the verified submission (issue 39): the same tokens, their own kind.
    bundled = Submission.objects.select_related("project", "artifact__blob").get(pk=verified.pk)
    bundle_valid = signed_bundle_path(bundled)
    with time_machine.travel(timezone.now() - timedelta(days=3)):
        bundle_expired = signed_bundle_path(bundled, ttl=timedelta(hours=1))
    # Read-only share links (issue 39): bob's of hill's tree, one expired, one revoked, alice's leaderboard,
    # and one of the other project's.
    share_link, share_raw = services.create_share_link(by=bob, kind="tree", days=7, project=hill)
    _, share_board = services.create_share_link(by=alice, kind="leaderboard", days=7, scenario=scenario)
    with time_machine.travel(timezone.now() - timedelta(days=3)):
        _, share_expired = services.create_share_link(by=bob, kind="tree", days=1, project=hill)
    gone, share_revoked = services.create_share_link(by=bob, kind="arena", days=7, project=hill)
    services.revoke_share_link(gone, by=alice)
    o_share, _ = services.create_share_link(by=dave, kind="tree", days=7, project=other)
    ids = {
        "share": share_link.pk,
        "o_share": o_share.pk,
        "share_tree": f"/s/{share_raw}/",
        "share_board": f"/s/{share_board}/",
        "share_expired": f"/s/{share_expired}/",
        "share_revoked": f"/s/{share_revoked}/",
        "share_unknown": "/s/" + "Z" * 43 + "/",
        "hill": hill.pk,
        "run": RUN,
        "scenario": SCENARIO_KEY,
        "cand": cand.pk,
        "verifying": verifying.pk,
        "verified": verified.pk,
        "approved": approved.pk,
        "uploaded": uploaded.pk,
        "artifact": artifact.pk,
        "turn": Run.objects.get(project=hill, external_id=RUN).turns.get(event_id="t0").pk,
        "checkpoint": Checkpoint.objects.get(run__project=hill).pk,
        "entry": entry.pk,
        "spare": spare.pk,
        "o_turn": Run.objects.get(project=other).turns.get().pk,
        "o_artifact": o_artifact.pk,
        "o_sub": o_sub.pk,
        "o_entry": o_entry.pk,
        "o_token": o_token.pk,
        "rule": rule.pk,
        "note": note.pk,
        "o_rule": o_rule.pk,
        "o_note": o_note.pk,
        "launch": launch.pk,
        "o_launch": o_launch.pk,
        "comment": comment.pk,
        "view": view.pk,
        "pview": private_view.pk,
        "o_view": o_view.pk,
        "sub_comment": sub_comment.pk,
        "o_comment": o_comment.pk,
        "preflight": PREFLIGHT_ID,
        "invitation": invitation.pk,
        "o_invitation": o_invitation.pk,
        "invite_token": invite_token,
        "invite_expired": services.invitation_token(stale),
        "invite_tampered": invite_token[:-2] + ("A" if invite_token[-2] != "A" else "B") + invite_token[-1],
        "link_valid": valid,
        "link_expired": expired,
        "link_tampered": tampered,
        "link_unknown": unknown,
        "bundle_valid": bundle_valid,
        "bundle_expired": bundle_expired,
        "bundle_tampered": bundle_valid[:-2] + ("A" if bundle_valid[-2] != "A" else "B") + "/",
        # An artifact's genuine token at the bundle's address: another kind, refused.
        "bundle_from_artifact": "/b/" + valid.split("/")[2] + "/",
    }
    assert [
        Submission.objects.get(pk=ids[k]).status
        for k in ("cand", "verifying", "verified", "approved", "uploaded")
    ] == ["candidate", "verifying", "verified", "approved", "uploaded"]
    return World(ids=ids, users=users, raw={"token": raw_token, "other": raw_other, "revoked": raw_revoked})


def _storages(root: Path) -> dict:
    from django.conf import settings

    return {
        **settings.STORAGES,
        "artifacts": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(root), "base_url": None},
        },
    }


@pytest.fixture(scope="module")
def matrix_world(django_db_setup, django_db_blocker, tmp_path_factory):
    """The world, built once for the module inside a transaction that is rolled back at its end; each
    test runs in a savepoint inside it (pytest-django's `db`), each cell in one more."""
    root = tmp_path_factory.mktemp("matrix-artifacts")
    fast = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    with (
        django_db_blocker.unblock(),
        override_settings(
            STORAGES=_storages(root), PASSWORD_HASHERS=fast, SMRWEB_WEBHOOK_ALLOWED_HOSTS=TEST_ALLOWED_HOSTS
        ),
        transaction.atomic(),
    ):
        built = build_world()
        built.artifact_root = root
        # One client per caller for the whole module: a client loads the middleware on its first
        # request, and WhiteNoise's scan of the static files is most of the cost of a fresh one.
        built.clients = clients(built)
        yield built
        transaction.set_rollback(True)


@pytest.fixture
def world(matrix_world, db, settings, monkeypatch) -> World:
    settings.STORAGES = _storages(matrix_world.artifact_root)  # where the world's bytes are
    # Rate limits (being added elsewhere) must not turn a cell into a 429: off, and caches of our own,
    # cleared before every cell.
    settings.RATELIMIT_ENABLE = False
    settings.CACHES = {
        alias: {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": f"permission-matrix-{alias}",
        }
        for alias in settings.CACHES
    }
    # Poll versions carry a 30-second tick; freeze it so a version read before a cell is still current in it.
    monkeypatch.setattr(live, "TICK_SECONDS", 10**12)
    matrix_world.preflights = []
    request_preflight, preflight_state = _fake_preflight(matrix_world.preflights)
    monkeypatch.setattr(tasks, "request_preflight", request_preflight)
    monkeypatch.setattr(tasks, "preflight_state", preflight_state)
    return matrix_world


def clients(w: World) -> dict[str, APIClient]:
    """One client per principal: sessions for people, bearer headers for tokens (sent to pages too)."""
    out = {"anon": APIClient()}
    for name in ("carol", "victor", "bob", "alice"):
        out[name] = APIClient()
        out[name].force_login(w.users[name])
    for name, raw in w.raw.items():
        out[name] = APIClient()
        out[name].credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return out


# --- effects ---------------------------------------------------------------------------------------------


def status_of(key: str) -> Callable[[World], str]:
    return lambda w: Submission.objects.get(pk=w.ids[key]).status


def count(model, **filters) -> Callable[[World], int]:
    return lambda w: model.objects.filter(**filters).count()


SPEND_GUARD_FORM = {
    "action": "spend_guard",
    "spend_stop": "pause",
    "spend_stop_usd": "20",
    "spend_stop_window": "50",
    "day_zone": "UTC",
}


def hill(attr: str) -> Callable[[World], Any]:
    return lambda w: getattr(Project.objects.get(slug="hill"), attr)


def done_run_field(attr: str) -> Callable[[World], Any]:
    return lambda w: getattr(
        Run.objects.filter(project__slug="hill", external_id=DONE_RUN).first(), attr, None
    )


def run_field(attr: str) -> Callable[[World], Any]:
    return lambda w: getattr(Run.objects.get(project__slug="hill", external_id=RUN), attr)


def comment_field(key: str, attr: str) -> Callable[[World], Any]:
    return lambda w: getattr(Comment.objects.get(pk=w.ids[key]), attr)


def share_links(w: World) -> tuple:
    return tuple(ShareLink.objects.order_by("pk").values_list("pk", "revoked_at"))


def saved_views(w: World) -> tuple:
    return tuple(SavedView.objects.order_by("pk").values_list("pk", "name", "shared"))


def note_body(w: World) -> str:
    return RunNote.objects.get(run__project__slug="hill", run__external_id=RUN).body


def silent_run_state(w: World) -> str:
    return Run.objects.get(project__slug="hill", external_id=SILENT_RUN).state


def preflight_calls(w: World) -> int:
    return len(w.preflights)


def fingerprint() -> tuple:
    """Everything a refused (or read-only) request must leave as it was."""
    return (
        tuple(Submission.objects.order_by("pk").values_list("pk", "status", "proposed_by_id")),
        tuple(ApiToken.objects.order_by("pk").values_list("pk", "revoked_at")),
        tuple(KnowledgeEntry.objects.order_by("pk").values_list("pk", "kind", "title", "body")),
        tuple(
            Project.objects.order_by("pk").values_list(
                "pk", "regression_threshold", "rollback_webhook_url", "require_second_reviewer"
            )
        ),
        tuple(
            Run.objects.order_by("pk").values_list(
                "pk", "budget_usd", "git_branch", "state", "display_name", "pinned"
            )
        ),
        tuple(RunTag.objects.order_by("pk").values_list("pk", "key", "value")),
        tuple(RunNote.objects.order_by("pk").values_list("pk", "body")),
        tuple(Comment.objects.order_by("pk").values_list("pk", "body", "deleted_at")),
        tuple(AlertRule.objects.order_by("pk").values_list("pk", "muted")),
        tuple(Notification.objects.order_by("pk").values_list("pk", "status", "read_at")),
        tuple(RunSnooze.objects.order_by("pk").values_list("pk", "until")),
        tuple(SavedView.objects.order_by("pk").values_list("pk", "name", "query", "shared")),
        tuple(ShareLink.objects.order_by("pk").values_list("pk", "revoked_at")),
        tuple(
            ProjectInvitation.objects.order_by("pk").values_list("pk", "nonce", "revoked_at", "accepted_at")
        ),
        _counts(
            AuditEvent,
            Rollback,
            RunControl,
            Scenario,
            MetricPoint,
            Artifact,
            ArenaResult,
            Review,
            SubmissionTransition,
            Membership,
            Checkpoint,
            UserPreference,
            RunLaunch,
            RunLogLine,
        ),
    )


def _counts(*models) -> tuple[int, ...]:
    """Row counts of several tables in one query (the fingerprint is taken twice per cell)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT "
            + ", ".join(
                f"(SELECT COUNT(*) FROM {connection.ops.quote_name(m._meta.db_table)})" for m in models
            )
        )
        return tuple(cursor.fetchone())


# --- the table -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    name: str
    method: str
    path: str  # formatted with the world's ids
    expect: str  # one answer per principal, in PRINCIPALS order
    ok: int | tuple[int, ...] = 200
    marker: str | None = None  # for ALLOW: must be in the body; for EMPTY: must not
    effect: Callable[[World], Any] | None = None  # for ALLOW: must change; otherwise must not
    data: Any = None  # a dict, or a callable of the world's ids
    json: bool = False  # send `data` as JSON (API); else as a form
    hx: bool = False  # an htmx request (HX-Request: true)
    only: str = ""  # ... that asks for one part of the page (X-Smrweb-Only), as a pager or a lazy card does
    poll: bool = (
        False  # also send the version(s) alice's copy of the fragment carries (X-Smrweb-Version/-Cards)
    )

    @property
    def api(self) -> bool:
        return self.path.startswith(("/api/", "/mlflow/api/"))  # (the rest of /mlflow/ are MLflow's links)

    def answers(self) -> dict[str, str]:
        codes = self.expect.split()
        assert len(codes) == len(PRINCIPALS), (
            f"{self.name}: {len(codes)} answers for {len(PRINCIPALS)} principals"
        )
        return dict(zip(PRINCIPALS, codes))


P = "/projects/hill"
R = f"/projects/hill/runs/{RUN}"
S = "/projects/hill/submissions"
A = "/api/v1/projects/hill"
AR = f"/api/v1/projects/hill/runs/{RUN}"
AS = "/api/v1/projects/hill/submissions"
HX = {"hx": True}
POLL = {"hx": True, "poll": True}


def upload(ids) -> dict:
    return {"file": SimpleUploadedFile("new.txt", b"matrix upload\n"), "path": "matrix/new.txt"}


ROWS = [
    # name, method, path                                                                   anon  carol victr
    # bob   alice token other revkd
    # --- sign-in
    # -----------------------------------------------------------------------------------------------------
    Row("login page", "GET", "/login/", "200   302   302   302   302   200   200   200"),
    Row("logout", "POST", "/logout/", "302   302   302   302   302   302   302   302"),
    # Everyone signed in may change their own password (the form comes back: no old password was sent).
    Row(
        "password change",
        "GET",
        "/password/",
        "LOGIN ALLOW ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker="Change your password",
    ),
    Row(
        "password change: empty form", "POST", "/password/", "LOGIN 200   200   200   200   LOGIN LOGIN LOGIN"
    ),
    Row(
        "password changed",
        "GET",
        "/password/done/",
        "LOGIN ALLOW ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker="Password changed",
    ),
    # Everyone may ask for a reset link (the same answer for any address) and use one.
    Row("password reset", "GET", "/password/reset/", "ALLOW " * 8, marker="Reset your password"),
    Row(
        "password reset: ask",
        "POST",
        "/password/reset/",
        "ALLOW " * 8,
        ok=302,
        data={"email": "bob@example.com"},
    ),
    Row("password reset: asked", "GET", "/password/reset/sent/", "ALLOW " * 8, marker="Check your e-mail"),
    Row(
        "password reset: a bad link",
        "GET",
        "/password/reset/MQ/bad-token/",
        "ALLOW " * 8,
        marker="This link does not work",
    ),
    Row("password reset: done", "GET", "/password/reset/done/", "ALLOW " * 8, marker="Password set"),
    # Everyone signed in may choose their own clock (UTC or their browser's zone); nobody else's.
    Row(
        "preferences",
        "GET",
        "/preferences/",
        "LOGIN ALLOW ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker="Show times in",
    ),
    Row(
        "preferences: local clock",
        "POST",
        "/preferences/",
        "LOGIN ALLOW ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"clock": "local", "local_zone": "Europe/Paris"},
        effect=count(UserPreference),
    ),
    # --- signed artifact links: the only way in without a session
    # ---------------------------------------------------
    Row(
        "signed link: valid",
        "GET",
        "{link_valid}",
        "ALLOW ALLOW ALLOW ALLOW ALLOW ALLOW ALLOW ALLOW",
        marker=ARTIFACT_BYTES.decode(),
    ),
    Row("signed link: expired", "GET", "{link_expired}", "410   410   410   410   410   410   410   410"),
    Row("signed link: tampered", "GET", "{link_tampered}", "403   403   403   403   403   403   403   403"),
    Row(
        "signed link: unknown artifact",
        "GET",
        "{link_unknown}",
        "403   403   403   403   403   403   403   403",
    ),
    # A submission's reproducibility bundle by its signed link (a gzip: no marker can be read in it).
    Row(
        "signed bundle link: valid",
        "GET",
        "{bundle_valid}",
        "ALLOW ALLOW ALLOW ALLOW ALLOW ALLOW ALLOW ALLOW",
    ),
    Row(
        "signed bundle link: expired",
        "GET",
        "{bundle_expired}",
        "410   410   410   410   410   410   410   410",
    ),
    Row(
        "signed bundle link: tampered",
        "GET",
        "{bundle_tampered}",
        "403   403   403   403   403   403   403   403",
    ),
    Row(
        "signed bundle link: an artifact's token",
        "GET",
        "{bundle_from_artifact}",
        "403   403   403   403   403   403   403   403",
    ),
    # --- read-only share links (issue 39): the public page, opened by anyone holding an unexpired link
    # ---------------
    Row(
        "share link: tree",
        "GET",
        "{share_tree}",
        "ALLOW ALLOW ALLOW ALLOW ALLOW ALLOW ALLOW ALLOW",
        marker=RUN,
    ),
    Row(
        "share link: leaderboard",
        "GET",
        "{share_board}",
        "ALLOW ALLOW ALLOW ALLOW ALLOW ALLOW ALLOW ALLOW",
        marker=RUN,  # hill's best run, in the row alice shared (her projects' names stay out: slugs only)
    ),
    Row("share link: expired", "GET", "{share_expired}", "410   410   410   410   410   410   410   410"),
    Row("share link: revoked", "GET", "{share_revoked}", "404   404   404   404   404   404   404   404"),
    Row("share link: unknown", "GET", "{share_unknown}", "404   404   404   404   404   404   404   404"),
    Row(
        "share links of a project",
        "GET",
        f"{P}/shares/",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=PROJECT_NAME,
    ),
    Row(
        "share a project's page",
        "POST",
        f"{P}/shares/",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"kind": "tree", "query": "state=running", "expires": "7"},
        effect=share_links,
    ),
    Row(
        "share a project's page (htmx)",
        "POST",
        f"{P}/shares/",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        data={"kind": "arena", "query": "", "expires": "1"},
        hx=True,
        effect=share_links,
    ),
    Row(
        "share a scenario's leaderboard",
        "POST",
        "/scenarios/{scenario}/share",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"kind": "leaderboard", "expires": "30"},
        effect=share_links,
    ),
    Row(
        "share a scenario's leaderboard (htmx)",
        "POST",
        "/scenarios/{scenario}/share",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        data={"kind": "leaderboard", "expires": "90"},
        hx=True,
        effect=share_links,
    ),
    Row(
        "revoke a share link",
        "POST",
        "/shares/{share}/revoke",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        effect=share_links,
    ),
    Row(
        "revoke another project's share link",
        "POST",
        "/shares/{o_share}/revoke",
        "LOGIN HIDE  HIDE  HIDE  HIDE  LOGIN LOGIN LOGIN",
        effect=share_links,
    ),
    # --- pages and their htmx partials (tokens are no session: a bearer header never signs a page in)
    # ---------------
    Row("overview", "GET", "/", "LOGIN EMPTY ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN", marker=PROJECT_NAME),
    Row(
        "overview cards (hx)",
        "GET",
        "/",
        "LOGIN EMPTY ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=PROJECT_NAME,
        **HX,
    ),
    Row(
        "overview cards poll, unchanged",
        "GET",
        "/",
        "LOGIN EMPTY 204   204   204   LOGIN LOGIN LOGIN",
        marker=PROJECT_NAME,
        **POLL,
    ),
    Row(
        "scenario page",
        "GET",
        "/scenarios/{scenario}/",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=SCENARIO_NAME,
    ),
    # Asking queues the preflight (a plain post is sent back to the page; htmx gets the polling fragment).
    Row(
        "scenario preflight",
        "POST",
        "/scenarios/{scenario}/preflight",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        effect=preflight_calls,
    ),
    Row(
        "scenario preflight asked (hx)",
        "POST",
        "/scenarios/{scenario}/preflight",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker="Queued for a worker",
        effect=preflight_calls,
        **HX,
    ),
    Row(
        "scenario preflight report (hx)",
        "GET",
        "/scenarios/{scenario}/preflight/{preflight}",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker="matrix-worker",
        **HX,
    ),
    Row("project page", "GET", f"{P}/", "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN", marker=RUN),
    Row(
        "project page: no such project",
        "GET",
        "/projects/nope/",
        "LOGIN HIDE  HIDE  HIDE  HIDE  LOGIN LOGIN LOGIN",
    ),
    Row(
        "project runs + leaderboard (hx)",
        "GET",
        f"{P}/",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=RUN,
        **HX,
    ),
    Row(
        "project runs poll, unchanged",
        "GET",
        f"{P}/",
        "LOGIN HIDE  204   204   204   LOGIN LOGIN LOGIN",
        **POLL,
    ),
    Row(
        "project score chart (hx)",
        "GET",
        f"{P}/chart/",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=RUN,
        **HX,
    ),
    Row(
        "project score chart poll, unchanged",
        "GET",
        f"{P}/chart/",
        "LOGIN HIDE  204   204   204   LOGIN LOGIN LOGIN",
        **POLL,
    ),
    Row(
        "tree of attempts", "GET", f"{P}/tree/", "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN", marker=RUN
    ),
    Row(
        "tree of attempts, filtered (hx)",
        "GET",
        f"{P}/tree/?q={RUN}",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=RUN,
        **HX,
    ),
    Row(
        "project spend by day (hx)",
        "GET",
        f"{P}/spend/",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=MODEL,
        **HX,
    ),
    Row(
        "project columns bar (hx)",
        "GET",
        f"{P}/columns/?col=tag:{TAG_KEY}",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=TAG_KEY,
        **HX,
    ),
    Row(
        "project page: a shared view",
        "GET",
        f"{P}/?view={{view}}",
        "LOGIN HIDE  302   302   302   LOGIN LOGIN LOGIN",
    ),
    Row(
        "project page: another's private view (ignored)",
        "GET",
        f"{P}/?view={{pview}}",
        "LOGIN HIDE  302   ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=PROJECT_NAME,
    ),
    Row(
        "save a view",
        "POST",
        f"{P}/views/",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"name": "matrix view", "query": "state=running&col=spend%3Atokens"},
        effect=saved_views,
    ),
    Row(
        "save a shared view",
        "POST",
        f"{P}/views/",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"name": "matrix view", "query": "state=running", "shared": "1"},
        effect=saved_views,
    ),
    Row(
        "delete a shared view",
        "POST",
        f"{P}/views/{{view}}/delete",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        effect=saved_views,
    ),
    Row(
        "delete another's private view",
        "POST",
        f"{P}/views/{{pview}}/delete",
        "LOGIN HIDE  ALLOW HIDE  HIDE  LOGIN LOGIN LOGIN",
        ok=302,
        effect=saved_views,
    ),
    Row(
        "delete another project's view",
        "POST",
        f"{P}/views/{{o_view}}/delete",
        "LOGIN HIDE  HIDE  HIDE  HIDE  LOGIN LOGIN LOGIN",
        ok=302,
        effect=saved_views,
    ),
    Row(
        "project spend by day poll, unchanged",
        "GET",
        f"{P}/spend/",
        "LOGIN HIDE  204   204   204   LOGIN LOGIN LOGIN",
        **POLL,
    ),
    Row(
        "compare runs",
        "GET",
        f"{P}/compare/?runs={RUN}",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=RUN,
    ),
    Row(
        "compare runs: the picker, once scrolled to",
        "GET",
        f"{P}/compare/?runs={RUN}&runs={RUN}",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=RUN,
        hx=True,
        only="pick",
    ),
    Row(
        "compare runs: a table's later rows, once scrolled to",
        "GET",
        f"{P}/compare/?runs={RUN}&runs={SILENT_RUN}&runs={DONE_RUN}",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        hx=True,
        only="side-rows",
    ),
    Row(
        "compare runs: the any-metric card, once the page is in",
        "GET",
        f"{P}/compare/?runs={RUN}&runs={SILENT_RUN}&group=project",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=RUN,
        hx=True,
        only="series",
    ),
    Row(
        "compare runs: the any-metric card with another project's run",
        "GET",
        f"{P}/compare/?runs={RUN}&runs={SILENT_RUN}&runs=other:{OTHER_RUN}",
        "LOGIN HIDE  EMPTY EMPTY EMPTY LOGIN LOGIN LOGIN",
        marker='"legendgroup":"other:',  # drawn only if read: the name itself is echoed in the form
        hx=True,
        only="series",
    ),
    Row(
        "compare table export",
        "GET",
        f"{P}/compare/export?runs={RUN}&format=jsonl",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=RUN,
    ),
    Row(
        "compare table export: another project's run",
        "GET",
        f"{P}/compare/export?runs={OTHER_RUN}&format=csv",
        "LOGIN HIDE  EMPTY EMPTY EMPTY LOGIN LOGIN LOGIN",
        marker=OTHER_RUN,
    ),
    Row(
        "leaderboard export",
        "GET",
        f"{P}/leaderboard/export?board=all&format=csv",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=RUN,
    ),
    Row(
        "compare: another project's run",
        "GET",
        f"{P}/compare/?runs={OTHER_RUN}",
        "LOGIN HIDE  EMPTY EMPTY EMPTY LOGIN LOGIN LOGIN",
        marker="/projects/other/",
    ),
    Row("review queue", "GET", f"{P}/review/", "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN", marker=RUN),
    Row(
        "knowledge page",
        "GET",
        f"{P}/knowledge/",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=KNOWLEDGE_TITLE,
    ),
    Row(
        "knowledge: add an entry",
        "POST",
        f"{P}/knowledge/",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"kind": "note", "title": "matrix note", "body": "b"},
        effect=count(KnowledgeEntry),
    ),
    Row(
        "knowledge: edit form",
        "GET",
        f"{P}/knowledge/{{entry}}/edit",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=KNOWLEDGE_TITLE,
    ),
    Row(
        "knowledge: edit",
        "POST",
        f"{P}/knowledge/{{entry}}/edit",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"kind": "note", "title": "edited", "body": ""},
        effect=lambda w: KnowledgeEntry.objects.get(pk=w.ids["entry"]).title,
    ),
    Row(
        "knowledge: edit another project's entry",
        "POST",
        f"{P}/knowledge/{{o_entry}}/edit",
        "LOGIN HIDE  DENY  HIDE  HIDE  LOGIN LOGIN LOGIN",
        data={"kind": "note", "title": "edited", "body": ""},
    ),
    # Start the next run: reviewers and admins ask; everyone who reads hill follows a launch.
    Row(
        "launch form",
        "GET",
        f"{P}/launches/new?from={RUN}",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=KNOWLEDGE_TITLE,  # in the carry-forward block the kickoff is prefilled with
    ),
    Row(
        "launch: start the next run",
        "POST",
        f"{P}/launches/new",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"idempotency_key": "matrix-form-key-1", "from_run": RUN, "text": "matrix: next run"},
        effect=count(RunLaunch),
    ),
    Row(
        "launch status",
        "GET",
        f"{P}/launches/{{launch}}/",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=LAUNCH_KICKOFF,
    ),
    Row(
        "launch status (hx)",
        "GET",
        f"{P}/launches/{{launch}}/",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker="requested",
        **HX,
    ),
    Row(
        "launch status poll, unchanged",
        "GET",
        f"{P}/launches/{{launch}}/",
        "LOGIN HIDE  204   204   204   LOGIN LOGIN LOGIN",
        **POLL,
    ),
    Row(
        "launch status: another project's",
        "GET",
        f"{P}/launches/{{o_launch}}/",
        "LOGIN HIDE  HIDE  HIDE  HIDE  LOGIN LOGIN LOGIN",
    ),
    Row(
        "project settings",
        "GET",
        f"{P}/settings/",
        "LOGIN HIDE  DENY  DENY  ALLOW LOGIN LOGIN LOGIN",
        marker=WEBHOOK,
    ),
    Row(
        "project settings: save",
        "POST",
        f"{P}/settings/",
        "LOGIN HIDE  DENY  DENY  ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"regression_threshold": "0.25", "rollback_webhook_url": WEBHOOK},
        effect=hill("regression_threshold"),
    ),
    Row(
        "project settings: spend guards",
        "POST",
        f"{P}/settings/",
        "LOGIN HIDE  DENY  DENY  ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data=SPEND_GUARD_FORM,
        effect=hill("spend_stop"),
    ),
    Row(
        "project settings: spend guards' dry run",
        "POST",
        f"{P}/settings/",
        "LOGIN HIDE  DENY  DENY  ALLOW LOGIN LOGIN LOGIN",
        data={**SPEND_GUARD_FORM, "action": "spend_guard_preview"},
        marker=WEBHOOK,
    ),
    Row(
        "project members",
        "GET",
        f"{P}/members/",
        "LOGIN HIDE  DENY  DENY  ALLOW LOGIN LOGIN LOGIN",
        marker=INVITEE,
    ),
    Row(
        "project members: add carol as viewer",
        "POST",
        f"{P}/members/",
        "LOGIN HIDE  DENY  DENY  ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"username": "carol", "role": "viewer"},
        effect=count(Membership, user__username="carol"),
    ),
    Row(
        "project members: invite by e-mail",
        "POST",
        f"{P}/invitations/",
        "LOGIN HIDE  DENY  DENY  ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"email": "new-5a0b@example.org", "role": "reviewer"},
        effect=count(ProjectInvitation),
    ),
    Row(
        "project members: resend an invitation",
        "POST",
        f"{P}/invitations/{{invitation}}/resend",
        "LOGIN HIDE  DENY  DENY  ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        effect=lambda w: ProjectInvitation.objects.get(pk=w.ids["invitation"]).nonce,
    ),
    Row(
        "project members: revoke an invitation",
        "POST",
        f"{P}/invitations/{{invitation}}/revoke",
        "LOGIN HIDE  DENY  DENY  ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        effect=lambda w: ProjectInvitation.objects.get(pk=w.ids["invitation"]).revoked_at,
    ),
    Row(
        "project members: revoke another project's invitation",
        "POST",
        f"{P}/invitations/{{o_invitation}}/revoke",
        "LOGIN HIDE  DENY  DENY  HIDE  LOGIN LOGIN LOGIN",
    ),
    # An invitation's link is for whoever holds it: signed out (bearer headers sign no page in) they see
    # the project and make an account; signed in with another address they are refused.
    Row(
        "invitation page",
        "GET",
        "/invite/{invite_token}/",
        "ALLOW 403   403   403   403   ALLOW ALLOW ALLOW",
        marker=PROJECT_NAME,
    ),
    Row(
        "invitation: join with a new account",
        "POST",
        "/invite/{invite_token}/",
        "ALLOW 403   403   403   403   ALLOW ALLOW ALLOW",
        ok=302,
        data={
            "username": "invitee",
            "password1": "matrix-pass-phrase-1",
            "password2": "matrix-pass-phrase-1",
        },
        effect=count(Membership, user__email=INVITEE),
    ),
    Row(
        "invitation: expired",
        "GET",
        "/invite/{invite_expired}/",
        "410   410   410   410   410   410   410   410",
    ),
    Row(
        "invitation: tampered",
        "GET",
        "/invite/{invite_tampered}/",
        "404   404   404   404   404   404   404   404",
    ),
    Row(
        "alerts page",
        "GET",
        f"{P}/alerts/",
        "LOGIN HIDE  DENY  DENY  ALLOW LOGIN LOGIN LOGIN",
        marker=ALERT_WEBHOOK,
    ),
    Row(
        "alerts: add a rule",
        "POST",
        f"{P}/alerts/",
        "LOGIN HIDE  DENY  DENY  ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"trigger": "run.stalled", "channel": "email", "target": "ops@example.com"},
        effect=count(AlertRule),
    ),
    Row(
        "alerts: add a rule to a private address",
        "POST",
        f"{P}/alerts/",
        "LOGIN HIDE  DENY  DENY  400   LOGIN LOGIN LOGIN",
        data={"trigger": "run.stalled", "channel": "webhook", "target": "http://10.20.30.40/hook"},
    ),
    Row(
        "alerts: mute a rule",
        "POST",
        f"{P}/alerts/{{rule}}/mute",
        "LOGIN HIDE  DENY  DENY  ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"muted": "1"},
        effect=lambda w: AlertRule.objects.get(pk=w.ids["rule"]).muted,
    ),
    Row(
        "alerts: mute another project's rule",
        "POST",
        f"{P}/alerts/{{o_rule}}/mute",
        "LOGIN HIDE  DENY  DENY  HIDE  LOGIN LOGIN LOGIN",
        data={"muted": "1"},
    ),
    Row(
        "alerts: mute by GET",
        "GET",
        f"{P}/alerts/{{rule}}/mute",
        "405   405   405   405   405   405   405   405",
    ),
    Row(
        "alerts: delete a rule",
        "POST",
        f"{P}/alerts/{{rule}}/delete",
        "LOGIN HIDE  DENY  DENY  ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        effect=count(AlertRule),
    ),
    Row(
        "alerts: delete another project's rule",
        "POST",
        f"{P}/alerts/{{o_rule}}/delete",
        "LOGIN HIDE  DENY  DENY  HIDE  LOGIN LOGIN LOGIN",
    ),
    Row(
        "alerts: send a test",
        "POST",
        f"{P}/alerts/{{rule}}/test",
        "LOGIN HIDE  DENY  DENY  ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        effect=count(Notification),
    ),
    Row(
        "alerts: send a test of another project's rule",
        "POST",
        f"{P}/alerts/{{o_rule}}/test",
        "LOGIN HIDE  DENY  DENY  HIDE  LOGIN LOGIN LOGIN",
    ),
    # Everyone signed in has an inbox; it shows their own notifications only (alice's names hill).
    Row(
        "inbox",
        "GET",
        "/inbox/",
        "LOGIN EMPTY EMPTY EMPTY ALLOW LOGIN LOGIN LOGIN",
        marker=f"Test of the run.stalled alert of {PROJECT_NAME}",
    ),
    Row(
        "inbox: mark all read",
        "POST",
        "/inbox/read",
        "LOGIN 302   302   302   ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"all": "1"},
        effect=count(Notification, read_at__isnull=True),
    ),
    Row(
        "inbox: mark one read",
        "POST",
        "/inbox/read",
        "LOGIN 302   302   302   ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data=lambda ids: {"id": str(ids["note"])},
        effect=count(Notification, read_at__isnull=True),
    ),
    Row(
        "inbox: mark someone else's notification read",
        "POST",
        "/inbox/read",
        "LOGIN 302   302   302   302   LOGIN LOGIN LOGIN",
        data=lambda ids: {"id": str(ids["o_note"])},
    ),
    Row("inbox: mark read by GET", "GET", "/inbox/read", "405   405   405   405   405   405   405   405"),
    # The inbox over the API: a person's own notifications; a project token has no inbox.
    Row(
        "api inbox",
        "GET",
        "/api/v1/inbox",
        "LOGIN EMPTY EMPTY EMPTY ALLOW DENY  DENY  LOGIN",
        marker=f"Test of the run.stalled alert of {PROJECT_NAME}",
    ),
    Row(
        "api inbox: mark read",
        "POST",
        "/api/v1/inbox/read",
        "LOGIN 200   200   200   ALLOW DENY  DENY  LOGIN",
        data=lambda ids: {"ids": [ids["note"]]},
        json=True,
        effect=count(Notification, read_at__isnull=True),
    ),
    Row(
        "API tokens page",
        "GET",
        f"{P}/tokens/",
        "LOGIN HIDE  DENY  DENY  ALLOW LOGIN LOGIN LOGIN",
        marker=TOKEN_NAME,
    ),
    # The audit log and its CSV: admins only (the token's name is in a token.created row's detail).
    Row(
        "audit log page",
        "GET",
        f"{P}/audit/?kind=token",
        "LOGIN HIDE  DENY  DENY  ALLOW LOGIN LOGIN LOGIN",
        marker=TOKEN_NAME,
    ),
    Row(
        "audit log CSV",
        "GET",
        f"{P}/audit.csv?actor=alice",
        "LOGIN HIDE  DENY  DENY  ALLOW LOGIN LOGIN LOGIN",
        marker=TOKEN_NAME,
    ),
    Row(
        "API tokens: create",
        "POST",
        f"{P}/tokens/",
        "LOGIN HIDE  DENY  DENY  ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"name": "matrix-token"},
        effect=count(ApiToken),
    ),
    Row(
        "API tokens: revoke",
        "POST",
        f"{P}/tokens/{{spare}}/revoke",
        "LOGIN HIDE  DENY  DENY  ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        effect=lambda w: ApiToken.objects.get(pk=w.ids["spare"]).revoked_at is None,
    ),
    Row(
        "API tokens: revoke another project's",
        "POST",
        f"{P}/tokens/{{o_token}}/revoke",
        "LOGIN HIDE  DENY  DENY  HIDE  LOGIN LOGIN LOGIN",
    ),
    Row(
        "API tokens: revoke by GET",
        "GET",
        f"{P}/tokens/{{spare}}/revoke",
        "405   405   405   405   405   405   405   405",
    ),
    Row(
        "submission page",
        "GET",
        f"{S}/{{verifying}}/",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=RUN,
    ),
    Row(
        "submission live block (hx)",
        "GET",
        f"{S}/{{verifying}}/",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=RUN,
        **HX,
    ),
    Row(
        "submission live block poll, unchanged",
        "GET",
        f"{S}/{{verifying}}/",
        "LOGIN HIDE  204   204   204   LOGIN LOGIN LOGIN",
        **POLL,
    ),
    Row(
        "submission page: another project's",
        "GET",
        f"{S}/{{o_sub}}/",
        "LOGIN HIDE  HIDE  HIDE  HIDE  LOGIN LOGIN LOGIN",
    ),
    Row(
        "submission: bundle download",
        "GET",
        f"{S}/{{verified}}/bundle",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
    ),
    Row(
        "submission: bundle of another project's",
        "GET",
        f"{S}/{{o_sub}}/bundle",
        "LOGIN HIDE  HIDE  HIDE  HIDE  LOGIN LOGIN LOGIN",
    ),
    Row(
        "submission: bundle by POST",
        "POST",
        f"{S}/{{verified}}/bundle",
        "405   405   405   405   405   405   405   405",
    ),
    Row(
        "submission: verify",
        "POST",
        f"{S}/{{cand}}/verify",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        effect=status_of("cand"),
    ),
    Row(
        "submission: approve",
        "POST",
        f"{S}/{{verified}}/approve",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"comment": "ok"},
        effect=status_of("verified"),
    ),
    Row(
        "submission: reject",
        "POST",
        f"{S}/{{verified}}/reject",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"comment": "no"},
        effect=status_of("verified"),
    ),
    Row(
        "submission: mark uploaded",
        "POST",
        f"{S}/{{approved}}/upload",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        effect=status_of("approved"),
    ),
    Row(
        "submission: record arena result",
        "POST",
        f"{S}/{{uploaded}}/record",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"rank": "3", "arena_score": "1200", "note": "n"},
        effect=count(ArenaResult),
    ),
    # Reviewers reach the action but the rule is the admin's: refused with a message, nothing changes.
    Row(
        "submission: exclude from the project's numbers",
        "POST",
        f"{S}/{{cand}}/exclude",
        "LOGIN HIDE  DENY  302   ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"reason": "junk from the API docs"},
        effect=count(AuditEvent, verb="submission.excluded"),
    ),
    Row(
        "submission: unknown action",
        "POST",
        f"{S}/{{cand}}/bogus",
        "LOGIN HIDE  DENY  302   302   LOGIN LOGIN LOGIN",
    ),
    Row(
        "submission: approve another project's",
        "POST",
        f"{S}/{{o_sub}}/approve",
        "LOGIN HIDE  DENY  HIDE  HIDE  LOGIN LOGIN LOGIN",
        data={"comment": "ok"},
    ),
    Row(
        "review queue: bulk approve",
        "POST",
        f"{P}/review/bulk",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data=lambda ids: {"action": "approve", "ids": [str(ids["verified"])]},
        effect=status_of("verified"),
    ),
    Row(
        "submission: approve by GET",
        "GET",
        f"{S}/{{verified}}/approve",
        "405   405   405   405   405   405   405   405",
    ),
    Row("run page", "GET", f"{R}/", "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN", marker=MODEL),
    Row(
        "run live block (hx)",
        "GET",
        f"{R}/",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=MODEL,
        **HX,
    ),
    Row(
        "run live block poll, unchanged",
        "GET",
        f"{R}/",
        "LOGIN HIDE  204   204   204   LOGIN LOGIN LOGIN",
        **POLL,
    ),
    Row(
        "run page: another project's run",
        "GET",
        f"{P}/runs/{OTHER_RUN}/",
        "LOGIN HIDE  HIDE  HIDE  HIDE  LOGIN LOGIN LOGIN",
    ),
    Row(
        "run metric panel (hx)",
        "GET",
        f"{R}/metrics/?key=loss",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker="loss",
        **HX,
    ),
    Row(
        "run turns in a bar (hx)",
        "GET",
        f"{R}/turns/?origin=2026-01-01T00:00:00%2B00:00&width_us=3600000000&bin=0&kind=d",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=MODEL,
        **HX,
    ),
    Row(
        "run turn detail (hx)",
        "GET",
        f"{R}/turns/{{turn}}/",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=MODEL,
        **HX,
    ),
    Row(
        "run turn detail: another project's turn (hx)",
        "GET",
        f"{R}/turns/{{o_turn}}/",
        "LOGIN HIDE  HIDE  HIDE  HIDE  LOGIN LOGIN LOGIN",
        **HX,
    ),
    Row(
        "run artifact download",
        "GET",
        f"{R}/artifacts/{{artifact}}/download",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=ARTIFACT_BYTES.decode(),
    ),
    Row(
        "run artifact download: another project's",
        "GET",
        f"{R}/artifacts/{{o_artifact}}/download",
        "LOGIN HIDE  HIDE  HIDE  HIDE  LOGIN LOGIN LOGIN",
    ),
    Row(
        "run artifact preview (hx)",
        "GET",
        f"{R}/artifacts/{{artifact}}/preview",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=ARTIFACT_PATH.rsplit("/", 1)[-1],
        **HX,
    ),
    Row(
        "run artifact preview: another project's (hx)",
        "GET",
        f"{R}/artifacts/{{o_artifact}}/preview",
        "LOGIN HIDE  HIDE  HIDE  HIDE  LOGIN LOGIN LOGIN",
        **HX,
    ),
    Row(
        "submission: diff (hx)",
        "GET",
        f"{S}/{{verified}}/diff?against=approved",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=ARTIFACT_PATH,
        **HX,
    ),
    Row(
        "submission: diff against another project's (hx)",
        "GET",
        f"{S}/{{verified}}/diff?against={{o_sub}}",
        "LOGIN HIDE  EMPTY EMPTY EMPTY LOGIN LOGIN LOGIN",
        marker=OTHER_RUN,
        **HX,
    ),
    Row(
        "submission: review panel (hx)",
        "GET",
        f"{S}/{{verified}}/review-panel",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=ARTIFACT_PATH,
        **HX,
    ),
    Row(
        "submission: another project's review panel (hx)",
        "GET",
        f"{S}/{{o_sub}}/review-panel",
        "LOGIN HIDE  HIDE  HIDE  HIDE  LOGIN LOGIN LOGIN",
        **HX,
    ),
    Row(
        "review queue: approve in place (hx)",
        "POST",
        f"{S}/{{verified}}/queue-review/approve",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        data={"comment": "ok"},
        effect=status_of("verified"),
        **HX,
    ),
    Row(
        "review queue: reject in place (hx)",
        "POST",
        f"{S}/{{verified}}/queue-review/reject",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        data={"comment": "no"},
        effect=status_of("verified"),
        **HX,
    ),
    Row(
        "review queue: review another project's in place (hx)",
        "POST",
        f"{S}/{{o_sub}}/queue-review/approve",
        "LOGIN HIDE  DENY  HIDE  HIDE  LOGIN LOGIN LOGIN",
        data={"comment": "ok"},
        **HX,
    ),
    Row(
        "run: stop",
        "POST",
        f"{R}/stop",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        effect=count(AuditEvent, verb="run.stop_requested"),
    ),
    Row("run: stop by GET", "GET", f"{R}/stop", "405   405   405   405   405   405   405   405"),
    Row(
        "run: snooze alerts",
        "POST",
        f"{R}/snooze",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"action": "snooze", "hours": "12"},
        effect=lambda w: tuple(RunSnooze.objects.values_list("until", flat=True)),
    ),
    Row(
        "run: lift the snooze",
        "POST",
        f"{R}/snooze",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"action": "unsnooze"},
        effect=count(RunSnooze),
    ),
    Row(
        "run: snooze another project's run",
        "POST",
        f"{P}/runs/{OTHER_RUN}/snooze",
        "LOGIN HIDE  DENY  HIDE  HIDE  LOGIN LOGIN LOGIN",
        data={"action": "snooze", "hours": "12"},
    ),
    Row("run: snooze by GET", "GET", f"{R}/snooze", "405   405   405   405   405   405   405   405"),
    Row(
        "run: exclude from the project's numbers",
        "POST",
        f"{R}/exclusion",
        "LOGIN HIDE  DENY  DENY  ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"action": "exclude", "reason": "a test run"},
        effect=count(AuditEvent, verb="run.excluded"),
    ),
    Row("run: exclude by GET", "GET", f"{R}/exclusion", "405   405   405   405   405   405   405   405"),
    Row(
        "run: close as abandoned",
        "POST",
        f"{P}/runs/{SILENT_RUN}/close",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"reason": "the harness died"},
        effect=silent_run_state,
    ),
    Row(
        "run: close another project's run",
        "POST",
        f"{P}/runs/{OTHER_RUN}/close",
        "LOGIN HIDE  DENY  HIDE  HIDE  LOGIN LOGIN LOGIN",
        data={"reason": "the harness died"},
    ),
    Row(
        "run: close by GET",
        "GET",
        f"{P}/runs/{SILENT_RUN}/close",
        "405   405   405   405   405   405   405   405",
    ),
    Row(
        "run: roll back",
        "POST",
        f"{R}/rollback",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data=lambda ids: {"submission": str(ids["cand"]), "reason": "matrix"},
        effect=count(Rollback),
    ),
    Row(
        "run: roll back to a checkpoint",
        "POST",
        f"{R}/rollback",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data=lambda ids: {"checkpoint": str(ids["checkpoint"])},
        effect=count(Rollback),
    ),
    Row(
        "run: roll back to another project's submission",
        "POST",
        f"{R}/rollback",
        "LOGIN HIDE  DENY  HIDE  HIDE  LOGIN LOGIN LOGIN",
        data=lambda ids: {"submission": str(ids["o_sub"])},
    ),
    # --- what people write: a run's name, pin and tags, its note, comments (viewers read, reviewers write;
    # editing a comment is its author's, deleting it its author's or an admin's)
    Row(
        "run: pin",
        "POST",
        f"{R}/labels",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"pinned": "1"},
        effect=run_field("pinned"),
    ),
    Row(
        "run: rename",
        "POST",
        f"{R}/labels",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"display_name": "Matrix name"},
        effect=run_field("display_name"),
    ),
    Row(
        "run: rename another project's run",
        "POST",
        f"{P}/runs/{OTHER_RUN}/labels",
        "LOGIN HIDE  DENY  HIDE  HIDE  LOGIN LOGIN LOGIN",
        data={"display_name": "Matrix name"},
    ),
    Row("run: labels by GET", "GET", f"{R}/labels", "405   405   405   405   405   405   405   405"),
    Row(
        "run: tag",
        "POST",
        f"{R}/tags",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"tag": "matrix=1"},
        effect=count(RunTag),
    ),
    Row(
        "run: remove a tag",
        "POST",
        f"{R}/tags",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"remove": TAG_KEY},
        effect=count(RunTag),
    ),
    Row("run: tags by GET", "GET", f"{R}/tags", "405   405   405   405   405   405   405   405"),
    Row(
        "run: note (hx)",
        "POST",
        f"{R}/note",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        data={"body": "matrix note"},
        marker="matrix note",
        effect=note_body,
        **HX,
    ),
    Row(
        "run: note",
        "POST",
        f"{R}/note",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"body": "matrix note"},
        effect=note_body,
    ),
    Row("run: note by GET", "GET", f"{R}/note", "405   405   405   405   405   405   405   405"),
    Row(
        "run comments page",
        "GET",
        f"{R}/comments/",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=COMMENT_TEXT,
    ),
    Row(
        "run comments (hx)",
        "GET",
        f"{R}/comments/",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=COMMENT_TEXT,
        **HX,
    ),
    Row(
        "run: comment (hx)",
        "POST",
        f"{R}/comments/",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        data={"body": "matrix comment"},
        marker="matrix comment",
        effect=count(Comment),
        **HX,
    ),
    Row(
        "run: comment on another project's run",
        "POST",
        f"{P}/runs/{OTHER_RUN}/comments/",
        "LOGIN HIDE  DENY  HIDE  HIDE  LOGIN LOGIN LOGIN",
        data={"body": "matrix comment"},
    ),
    Row(
        "submission comments page",
        "GET",
        f"{S}/{{cand}}/comments/",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=SUB_COMMENT_TEXT,
    ),
    Row(
        "submission comments (hx)",
        "GET",
        f"{S}/{{cand}}/comments/",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker=SUB_COMMENT_TEXT,
        **HX,
    ),
    Row(
        "submission: comment (hx)",
        "POST",
        f"{S}/{{cand}}/comments/",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        data={"body": "matrix comment"},
        marker="matrix comment",
        effect=count(Comment),
        **HX,
    ),
    Row(
        "submission comments: another project's submission",
        "GET",
        f"{S}/{{o_sub}}/comments/",
        "LOGIN HIDE  HIDE  HIDE  HIDE  LOGIN LOGIN LOGIN",
    ),
    Row(
        "comment: edit (hx)",
        "POST",
        f"{P}/comments/{{comment}}",
        "LOGIN HIDE  DENY  ALLOW DENY  LOGIN LOGIN LOGIN",
        data={"action": "edit", "body": "matrix edit"},
        marker="matrix edit",
        effect=comment_field("comment", "body"),
        **HX,
    ),
    Row(
        "comment: delete",
        "POST",
        f"{P}/comments/{{comment}}",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"action": "delete"},
        effect=comment_field("comment", "deleted_at"),
    ),
    Row(
        "comment: delete another project's comment",
        "POST",
        f"{P}/comments/{{o_comment}}",
        "LOGIN HIDE  DENY  HIDE  HIDE  LOGIN LOGIN LOGIN",
        data={"action": "delete"},
    ),
    Row(
        "comment by GET", "GET", f"{P}/comments/{{comment}}", "405   405   405   405   405   405   405   405"
    ),
    # Steering a live run (message, pause, resume): reviewers and admins; the status part for readers.
    Row(
        "run: steer, send a message",
        "POST",
        f"{R}/steer",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"action": "message", "body": "matrix message"},
        effect=count(RunControl),
    ),
    Row(
        "run: steer, pause (hx)",
        "POST",
        f"{R}/steer",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        data={"action": "pause"},
        effect=count(RunControl, kind="pause"),
        **HX,
    ),
    Row("run: steer by GET", "GET", f"{R}/steer", "405   405   405   405   405   405   405   405"),
    Row(
        "run: steer status (hx)",
        "GET",
        f"{R}/steer/status",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        marker='id="steer-status"',
        **HX,
    ),
    Row(
        "run: steer status poll, unchanged",
        "GET",
        f"{R}/steer/status",
        "LOGIN HIDE  204   204   204   LOGIN LOGIN LOGIN",
        **POLL,
    ),
    Row(
        "run: steer another project's run",
        "POST",
        f"{P}/runs/{OTHER_RUN}/steer",
        "LOGIN HIDE  DENY  HIDE  HIDE  LOGIN LOGIN LOGIN",
        data={"action": "pause"},
    ),
    # --- OTLP/HTTP (bearer tokens only; the project is the token's, so another project's token writes there)
    # ---------
    Row(
        "otlp traces export",
        "POST",
        "/v1/traces",
        "401   401   401   401   401   200   200   401",
        data={"resourceSpans": []},
        json=True,
    ),
    # --- MLflow's tracking API (/mlflow: sessions by role, viewer to read and admin to write, as for events;
    # a token within its project, where another project's token finds nothing; errors in MLflow's shape)
    Row(
        "mlflow experiment by name",
        "GET",
        "/mlflow/api/2.0/mlflow/experiments/get-by-name?experiment_name=hill",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW HIDE  LOGIN",
        marker=PROJECT_NAME,
    ),
    Row(
        "mlflow experiment",
        "GET",
        "/mlflow/api/2.0/mlflow/experiments/get?experiment_id={hill}",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW HIDE  LOGIN",
        marker=PROJECT_NAME,
    ),
    Row(
        "mlflow experiments: search",
        "POST",
        "/mlflow/api/2.0/mlflow/experiments/search",
        "LOGIN EMPTY ALLOW ALLOW ALLOW ALLOW EMPTY LOGIN",
        marker=PROJECT_NAME,
        data={"max_results": 100},
        json=True,
    ),
    Row(
        "mlflow experiments: create (projects are made in smrweb)",
        "POST",
        "/mlflow/api/2.0/mlflow/experiments/create",
        "LOGIN DENY  DENY  DENY  DENY  DENY  DENY  LOGIN",
        data={"name": "matrix-new"},
        json=True,
    ),
    Row(
        "mlflow run: create",
        "POST",
        "/mlflow/api/2.0/mlflow/runs/create",
        "LOGIN HIDE  DENY  DENY  ALLOW ALLOW HIDE  LOGIN",
        data=lambda ids: {"experiment_id": str(ids["hill"])},
        json=True,
        effect=count(Run, project__slug="hill"),
    ),
    Row(
        "mlflow run",
        "GET",
        f"/mlflow/api/2.0/mlflow/runs/get?run_id={RUN}",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW HIDE  LOGIN",
        marker=RUN,
    ),
    Row(
        "mlflow run: update",
        "POST",
        "/mlflow/api/2.0/mlflow/runs/update",
        "LOGIN HIDE  DENY  DENY  ALLOW ALLOW HIDE  LOGIN",
        data={"run_id": RUN, "status": "KILLED"},
        json=True,
        effect=run_field("state"),
    ),
    Row(
        "mlflow run: log metric",
        "POST",
        "/mlflow/api/2.0/mlflow/runs/log-metric",
        "LOGIN HIDE  DENY  DENY  ALLOW ALLOW HIDE  LOGIN",
        data={"run_id": RUN, "key": "loss", "value": 0.25, "timestamp": 1_700_000_000_000, "step": 7},
        json=True,
        effect=count(MetricPoint, run__external_id=RUN),
    ),
    Row(
        "mlflow run: log param",
        "POST",
        "/mlflow/api/2.0/mlflow/runs/log-parameter",
        "LOGIN HIDE  DENY  DENY  ALLOW ALLOW HIDE  LOGIN",
        data={"run_id": RUN, "key": "lr", "value": "0.01"},
        json=True,
        effect=count(RunParam, run__external_id=RUN),
    ),
    Row(
        "mlflow run: set tag",
        "POST",
        "/mlflow/api/2.0/mlflow/runs/set-tag",
        "LOGIN HIDE  DENY  DENY  ALLOW ALLOW HIDE  LOGIN",
        data={"run_id": RUN, "key": "mlflow.source.type", "value": "LOCAL"},
        json=True,
        effect=count(RunTag, run__external_id=RUN),
    ),
    Row(
        "mlflow run: delete tag",
        "POST",
        "/mlflow/api/2.0/mlflow/runs/delete-tag",
        "LOGIN HIDE  DENY  DENY  ALLOW ALLOW HIDE  LOGIN",
        data={"run_id": RUN, "key": TAG_KEY},
        json=True,
        effect=count(RunTag, run__external_id=RUN),
    ),
    Row(
        "mlflow run: log batch",
        "POST",
        "/mlflow/api/2.0/mlflow/runs/log-batch",
        "LOGIN HIDE  DENY  DENY  ALLOW ALLOW HIDE  LOGIN",
        data={
            "run_id": RUN,
            "metrics": [{"key": "acc", "value": 0.5, "timestamp": 1_700_000_000_000, "step": 1}],
            "params": [{"key": "layers", "value": "4"}],
        },
        json=True,
        effect=count(RunParam, run__external_id=RUN),
    ),
    Row(
        "mlflow runs: search",
        "POST",
        "/mlflow/api/2.0/mlflow/runs/search",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW HIDE  LOGIN",
        marker=RUN,
        data=lambda ids: {"experiment_ids": [str(ids["hill"])]},
        json=True,
    ),
    Row(
        "mlflow logged models: search (none kept)",
        "POST",
        "/mlflow/api/2.0/mlflow/logged-models/search",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW HIDE  LOGIN",
        marker="models",
        data=lambda ids: {"experiment_ids": [str(ids["hill"])]},
        json=True,
    ),
    Row(
        "mlflow metric history",
        "GET",
        f"/mlflow/api/2.0/mlflow/metrics/get-history?run_id={RUN}&metric_key=loss",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW HIDE  LOGIN",
        marker='"loss"',
    ),
    Row(
        "mlflow server info (no project data)",
        "GET",
        "/mlflow/api/3.0/mlflow/server-info",
        "LOGIN ALLOW ALLOW ALLOW ALLOW ALLOW ALLOW LOGIN",
        marker="multipart_uploads_enabled",
    ),
    Row(
        "mlflow artifacts: list",
        "GET",
        f"/mlflow/api/2.0/mlflow-artifacts/artifacts?path={{hill}}/{RUN}/artifacts/submission",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW HIDE  LOGIN",
        marker=ARTIFACT_PATH.split("/")[-1],
    ),
    Row(
        "mlflow artifact: download",
        "GET",
        f"/mlflow/api/2.0/mlflow-artifacts/artifacts/{{hill}}/{RUN}/artifacts/{ARTIFACT_PATH}",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW HIDE  LOGIN",
        marker=ARTIFACT_BYTES.decode(),
    ),
    Row(
        "mlflow artifact: upload",
        "PUT",
        f"/mlflow/api/2.0/mlflow-artifacts/artifacts/{{hill}}/{RUN}/artifacts/matrix/upload.json",
        "LOGIN HIDE  DENY  DENY  ALLOW ALLOW HIDE  LOGIN",
        data={"matrix": "upload"},
        json=True,
        effect=count(Artifact, run__external_id=RUN),
    ),
    # The links the MLflow client prints: /mlflow/ (no data: its script reads the fragment) sends the browser
    # on to the run's or the experiment's page, for people who may see it.
    Row("mlflow link page", "GET", "/mlflow/", "ALLOW " * 8, marker="Opening the MLflow link"),
    Row(
        "mlflow link: run",
        "GET",
        f"/mlflow/runs/{RUN}?experiment={{hill}}",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
    ),
    Row(
        "mlflow link: experiment",
        "GET",
        "/mlflow/experiments/{hill}",
        "LOGIN HIDE  ALLOW ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
    ),
    Row(
        "mlflow: an endpoint smrweb does not offer",
        "POST",
        "/mlflow/api/2.0/mlflow/runs/delete",
        "404   404   404   404   404   404   404   404",
        data={"run_id": RUN},
        json=True,
    ),
    # --- REST API (sessions act by role; a project token acts within its project and cannot review)
    # ------------------
    Row(
        "api health", "GET", "/api/v1/health", "ALLOW ALLOW ALLOW ALLOW ALLOW ALLOW ALLOW ALLOW", marker="ok"
    ),
    # /metrics goes by network or scrape token, never by role: every caller here comes from loopback, the
    # default allowed network (refusals from elsewhere, and the token: tests/test_opsmetrics.py). It names
    # projects by slug and counts, never their names, runs or content.
    Row("metrics scrape (loopback)", "GET", "/metrics", "ALLOW " * 8, marker="smrweb_broker_up"),
    # A scenario is seen by its projects' members and tokens (and staff), shared presets by everyone.
    Row(
        "api scenarios",
        "GET",
        "/api/v1/scenarios/",
        "LOGIN EMPTY ALLOW ALLOW ALLOW ALLOW EMPTY LOGIN",
        marker=SCENARIO_KEY,
    ),
    Row(
        "api scenarios: create (staff only)",
        "POST",
        "/api/v1/scenarios/",
        "LOGIN DENY  DENY  DENY  DENY  DENY  DENY  LOGIN",
        data={"key": "matrix-new", "name": "new"},
        json=True,
    ),
    Row(
        "api scenario",
        "GET",
        "/api/v1/scenarios/{scenario}/",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW HIDE  LOGIN",
        marker=SCENARIO_NAME,
    ),
    # The leaderboard across projects lists only the projects the caller reads (a token: its own).
    Row(
        "api scenario leaderboard",
        "GET",
        "/api/v1/scenarios/{scenario}/leaderboard",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW HIDE  LOGIN",
        marker='"project":"hill"',
    ),
    Row(
        "api scenario preflight",
        "POST",
        "/api/v1/scenarios/{scenario}/preflight",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW HIDE  LOGIN",
        ok=202,
        marker=PREFLIGHT_ID,
        effect=preflight_calls,
    ),
    Row(
        "api scenario preflight report",
        "GET",
        "/api/v1/scenarios/{scenario}/preflight/{preflight}",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW HIDE  LOGIN",
        marker="matrix-worker",
    ),
    Row(
        "api projects",
        "GET",
        "/api/v1/projects/",
        "LOGIN EMPTY ALLOW ALLOW ALLOW ALLOW EMPTY LOGIN",
        marker=PROJECT_NAME,
    ),
    # Creating a project is for staff and users given `tracking.add_project` (none of the callers).
    Row(
        "api projects: create",
        "POST",
        "/api/v1/projects/",
        "LOGIN DENY  DENY  DENY  DENY  DENY  DENY  LOGIN",
        ok=201,
        data={"slug": "matrix-new"},
        json=True,
        effect=count(Project),
    ),
    Row(
        "api projects: create bound to an SMR project",
        "POST",
        "/api/v1/projects/",
        "LOGIN DENY  DENY  DENY  DENY  DENY  DENY  LOGIN",
        ok=201,
        data={"slug": "mirror", "source": "smr", "smr_project_id": "victim-smr"},
        json=True,
        effect=count(Project),
    ),
    Row(
        "api project", "GET", f"{A}/", "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN", marker=PROJECT_NAME
    ),
    # An outsider's answer is the same as for a project that does not exist; a token's names only its own.
    Row(
        "api project: no such project",
        "GET",
        "/api/v1/projects/nope/",
        "LOGIN HIDE  HIDE  HIDE  HIDE  DENY  DENY  LOGIN",
    ),
    Row("api runs", "GET", f"{A}/runs", "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN", marker=RUN),
    Row(
        "api tree of attempts",
        "GET",
        f"{A}/tree",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
        marker=RUN,
    ),
    Row(
        "api project spend",
        "GET",
        f"{A}/spend",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
        marker=MODEL,
    ),
    Row("api spend guards", "GET", f"{A}/spend-guard", "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN"),
    Row(
        "api spend guards: change",
        "PATCH",
        f"{A}/spend-guard",
        "LOGIN HIDE  DENY  DENY  ALLOW DENY  DENY  LOGIN",
        data={"spend_stop": "pause", "spend_stop_usd": "20"},
        json=True,
        effect=hill("spend_stop"),
    ),
    Row(
        "api spend guards: dry run",
        "GET",
        f"{A}/spend-guard/dry-run?spend_stop_usd=1",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
    ),
    Row(
        "api saved views",
        "GET",
        f"{A}/views",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
        marker=VIEW_NAME,
    ),
    Row(
        "api saved views: save",
        "POST",
        f"{A}/views",
        "LOGIN HIDE  ALLOW ALLOW ALLOW DENY  DENY  LOGIN",
        ok=201,
        data={"name": "matrix view", "query": "col=metric%3Aloss"},
        json=True,
        effect=saved_views,
    ),
    Row(
        "api saved view",
        "GET",
        f"{A}/views/{{view}}",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
        marker=VIEW_NAME,
    ),
    Row(
        "api saved view: another's private one",
        "GET",
        f"{A}/views/{{pview}}",
        "LOGIN HIDE  ALLOW HIDE  HIDE  HIDE  DENY  LOGIN",
        marker=TAG_KEY,
    ),
    Row(
        "api saved view: delete a shared one",
        "DELETE",
        f"{A}/views/{{view}}",
        "LOGIN HIDE  DENY  ALLOW ALLOW DENY  DENY  LOGIN",
        ok=204,
        effect=saved_views,
    ),
    Row(
        "api runs through a view",
        "GET",
        f"{A}/runs?view={{view}}",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
        marker=RUN,
    ),
    Row(
        "api runs through another's private view",
        "GET",
        f"{A}/runs?view={{pview}}",
        "LOGIN HIDE  ALLOW 400   400   400   DENY  LOGIN",
        marker=TAG_KEY,
    ),
    Row(
        "api compare series",
        "GET",
        f"{A}/compare/series?runs={RUN}&group=project",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
        marker=RUN,
    ),
    # A run of a project the caller cannot read is "missing", exactly like one that does not exist.
    Row(
        "api compare series: another project's run",
        "GET",
        f"{A}/compare/series?runs={RUN},other:{OTHER_RUN}",
        "LOGIN HIDE  EMPTY EMPTY EMPTY EMPTY DENY  LOGIN",
        marker='"project":"other"',
    ),
    # Exports (?format=csv|jsonl) read what the JSON list reads, for the same callers.
    Row(
        "api runs: CSV export",
        "GET",
        f"{A}/runs?format=csv",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
        marker=RUN,
    ),
    # Alert rules: the project's readers (tokens too) read them; only an admin's session changes them (a
    # rule sends project data to an address, which a harness token must not choose).
    Row(
        "api alert rules",
        "GET",
        f"{A}/alert-rules/",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
        marker="run.failed",
    ),
    Row(
        "api alert rules: create",
        "POST",
        f"{A}/alert-rules/",
        "LOGIN HIDE  DENY  DENY  ALLOW DENY  DENY  LOGIN",
        ok=201,
        data={"trigger": "run.stalled", "channel": "email", "target": "ops@example.com"},
        json=True,
        effect=count(AlertRule),
    ),
    Row(
        "api alert rule",
        "GET",
        f"{A}/alert-rules/{{rule}}/",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
        marker="run.failed",
    ),
    Row(
        "api alert rule: another project's, through hill",
        "GET",
        f"{A}/alert-rules/{{o_rule}}/",
        "LOGIN HIDE  HIDE  HIDE  HIDE  HIDE  DENY  LOGIN",
    ),
    Row(
        "api alert rule: deliveries",
        "GET",
        f"{A}/alert-rules/{{rule}}/deliveries",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
    ),
    Row(
        "api alert rule: mute",
        "PATCH",
        f"{A}/alert-rules/{{rule}}/",
        "LOGIN HIDE  DENY  DENY  ALLOW DENY  DENY  LOGIN",
        data={"muted": True},
        json=True,
        effect=count(AlertRule, muted=True),
    ),
    Row(
        "api alert rule: delete",
        "DELETE",
        f"{A}/alert-rules/{{rule}}/",
        "LOGIN HIDE  DENY  DENY  ALLOW DENY  DENY  LOGIN",
        ok=204,
        effect=count(AlertRule),
    ),
    Row(
        "api alert rule: test send",
        "POST",
        f"{A}/alert-rules/{{rule}}/test",
        "LOGIN HIDE  DENY  DENY  ALLOW DENY  DENY  LOGIN",
        ok=202,
        json=True,
        effect=count(Notification),
    ),
    Row(
        "api carry-forward",
        "GET",
        f"{A}/knowledge/carry-forward",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
        marker=KNOWLEDGE_TITLE,
    ),
    Row(
        "api launches",
        "GET",
        f"{A}/launches",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
        marker=LAUNCH_KICKOFF,
    ),
    # A person's action: a project token reads launches but never starts a run.
    Row(
        "api launches: start the next run",
        "POST",
        f"{A}/launches",
        "LOGIN HIDE  DENY  ALLOW ALLOW DENY  DENY  LOGIN",
        ok=201,
        data={"from_run": RUN, "text": "matrix: next run"},
        json=True,
        effect=count(RunLaunch),
    ),
    Row(
        "api launch",
        "GET",
        f"{A}/launches/{{launch}}",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
        marker=LAUNCH_KICKOFF,
    ),
    Row(
        "api launch: another project's",
        "GET",
        f"{A}/launches/{{o_launch}}",
        "LOGIN HIDE  HIDE  HIDE  HIDE  HIDE  DENY  LOGIN",
    ),
    Row("api submissions", "GET", f"{AS}", "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN", marker=RUN),
    Row(
        "api submissions: JSONL export",
        "GET",
        f"{AS}?format=jsonl",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
        marker=RUN,
    ),
    Row(
        "api submission",
        "GET",
        f"{AS}/{{verified}}",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
        marker=RUN,
    ),
    Row(
        "api submission diff",
        "GET",
        f"{AS}/{{verified}}/diff",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
        marker=RUN,
    ),
    Row(
        "api submission diff: another project's",
        "GET",
        f"{AS}/{{o_sub}}/diff",
        "LOGIN HIDE  HIDE  HIDE  HIDE  HIDE  DENY  LOGIN",
    ),
    Row(
        "api submission: another project's",
        "GET",
        f"{AS}/{{o_sub}}",
        "LOGIN HIDE  HIDE  HIDE  HIDE  HIDE  DENY  LOGIN",
    ),
    Row(
        "api submission bundle",
        "GET",
        f"{AS}/{{verified}}/bundle",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
    ),
    Row(
        "api submission bundle: another project's",
        "GET",
        f"{AS}/{{o_sub}}/bundle",
        "LOGIN HIDE  HIDE  HIDE  HIDE  HIDE  DENY  LOGIN",
    ),
    Row(
        "api bundle key (no account needed)",
        "GET",
        "/api/v1/bundle-key",
        "ALLOW ALLOW ALLOW ALLOW ALLOW ALLOW ALLOW ALLOW",
        marker="ed25519",
    ),
    Row(
        "api submission: verify",
        "POST",
        f"{AS}/{{cand}}/verify",
        "LOGIN HIDE  DENY  ALLOW ALLOW DENY  DENY  LOGIN",
        ok=202,
        effect=status_of("cand"),
    ),
    Row(
        "api submission: approve",
        "POST",
        f"{AS}/{{verified}}/approve",
        "LOGIN HIDE  DENY  ALLOW ALLOW DENY  DENY  LOGIN",
        data={"comment": "ok"},
        json=True,
        effect=status_of("verified"),
    ),
    Row(
        "api submission: reject",
        "POST",
        f"{AS}/{{verified}}/reject",
        "LOGIN HIDE  DENY  ALLOW ALLOW DENY  DENY  LOGIN",
        data={"comment": "no"},
        json=True,
        effect=status_of("verified"),
    ),
    Row(
        "api submission: mark uploaded",
        "POST",
        f"{AS}/{{approved}}/uploaded",
        "LOGIN HIDE  DENY  ALLOW ALLOW DENY  DENY  LOGIN",
        effect=status_of("approved"),
    ),
    Row(
        "api submission: record arena result",
        "POST",
        f"{AS}/{{uploaded}}/arena-result",
        "LOGIN HIDE  DENY  ALLOW ALLOW DENY  DENY  LOGIN",
        ok=201,
        data={"rank": 3, "arena_score": 1200.0, "note": "n"},
        json=True,
        effect=count(ArenaResult),
    ),
    Row(
        "api submission: record the arena's refusal",
        "POST",
        f"{AS}/{{uploaded}}/refused",
        "LOGIN HIDE  DENY  ALLOW ALLOW DENY  DENY  LOGIN",
        data={"reason": "over the arena's size limit"},
        json=True,
        effect=status_of("uploaded"),
    ),
    Row(
        "api submission: bulk approve",
        "POST",
        f"{AS}/bulk",
        "LOGIN HIDE  DENY  ALLOW ALLOW DENY  DENY  LOGIN",
        data=lambda ids: {"action": "approve", "ids": [ids["verified"]]},
        json=True,
        effect=status_of("verified"),
    ),
    Row(
        "api submission: approve another project's",
        "POST",
        f"{AS}/{{o_sub}}/approve",
        "LOGIN HIDE  HIDE  HIDE  HIDE  HIDE  DENY  LOGIN",
        data={"comment": "ok"},
        json=True,
    ),
    Row("api run", "GET", f"{AR}", "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN", marker=RUN),
    Row(
        "api run: settings",
        "PATCH",
        f"{AR}",
        "LOGIN HIDE  DENY  DENY  ALLOW ALLOW DENY  LOGIN",
        data={"git_branch": "matrix-branch"},
        json=True,
        effect=run_field("git_branch"),
    ),
    Row(
        "api run: another project's",
        "GET",
        f"{A}/runs/{OTHER_RUN}",
        "LOGIN HIDE  HIDE  HIDE  HIDE  HIDE  DENY  LOGIN",
    ),
    Row(
        "api run: push events",
        "POST",
        f"{AR}/events",
        "LOGIN HIDE  DENY  DENY  ALLOW ALLOW DENY  LOGIN",
        data=[{"type": "metric", "id": "matrix", "key": "loss", "value": 0.1, "step": 9}],
        json=True,
        effect=count(MetricPoint),
    ),
    Row(
        "api run: push log lines",
        "POST",
        f"{AR}/logs",
        "LOGIN HIDE  DENY  DENY  ALLOW ALLOW DENY  LOGIN",
        ok=201,
        data={"batch_id": "matrix", "lines": [{"text": "matrix line", "level": "info"}]},
        json=True,
        effect=count(RunLogLine),
    ),
    Row(
        "api run: read its log",
        "GET",
        f"{AR}/logs",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
        marker=LOG_TEXT,
    ),
    Row(
        "api run: roll back",
        "POST",
        f"{AR}/rollback",
        "LOGIN HIDE  DENY  ALLOW ALLOW DENY  DENY  LOGIN",
        ok=202,
        data=lambda ids: {"submission": ids["cand"], "reason": "matrix"},
        json=True,
        effect=count(Rollback),
    ),
    Row(
        "api run: roll back to a checkpoint",
        "POST",
        f"{AR}/rollback",
        "LOGIN HIDE  DENY  ALLOW ALLOW DENY  DENY  LOGIN",
        ok=202,
        data={"checkpoint": "cp-1"},
        json=True,
        effect=count(Rollback),
    ),
    # The target is looked up before the role is checked: a refused caller of hill gets the field error.
    Row(
        "api run: roll back to another project's submission",
        "POST",
        f"{AR}/rollback",
        "LOGIN HIDE  400   400   400   400   DENY  LOGIN",
        data=lambda ids: {"submission": ids["o_sub"]},
        json=True,
    ),
    # Steering is a person's (reviewers and admins): a project token cannot, whoever holds it.
    Row(
        "api run: send a message",
        "POST",
        f"{AR}/messages",
        "LOGIN HIDE  DENY  ALLOW ALLOW DENY  DENY  LOGIN",
        ok=202,
        data={"body": "matrix message"},
        json=True,
        effect=count(RunControl),
    ),
    Row(
        "api run: an empty message",
        "POST",
        f"{AR}/messages",
        "LOGIN HIDE  DENY  400   400   DENY  DENY  LOGIN",
        data={"body": ""},
        json=True,
    ),
    Row(
        "api run: pause",
        "POST",
        f"{AR}/pause",
        "LOGIN HIDE  DENY  ALLOW ALLOW DENY  DENY  LOGIN",
        ok=202,
        effect=count(RunControl, kind="pause"),
    ),
    # The run is running, not paused: a resume is refused for everyone allowed to ask (409, nothing written).
    Row(
        "api run: resume a running run",
        "POST",
        f"{AR}/resume",
        "LOGIN HIDE  DENY  409   409   DENY  DENY  LOGIN",
    ),
    Row(
        "api run: controls",
        "GET",
        f"{AR}/controls",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
        marker='"results"',
    ),
    Row(
        "api run: pause another project's run",
        "POST",
        f"{A}/runs/{OTHER_RUN}/pause",
        "LOGIN HIDE  HIDE  HIDE  HIDE  HIDE  DENY  LOGIN",
    ),
    Row(
        "api run: close as abandoned",
        "POST",
        f"{A}/runs/{SILENT_RUN}/close",
        "LOGIN HIDE  DENY  ALLOW ALLOW DENY  DENY  LOGIN",
        data={"reason": "the harness died"},
        json=True,
        effect=silent_run_state,
    ),
    # A run that sent news within the stall threshold: the reviewer's refusal is the domain's (409).
    Row(
        "api run: close a run that is not silent",
        "POST",
        f"{AR}/close",
        "LOGIN HIDE  DENY  409   409   DENY  DENY  LOGIN",
        data={"reason": "the harness died"},
        json=True,
    ),
    Row(
        "api run: close another project's run",
        "POST",
        f"{A}/runs/{OTHER_RUN}/close",
        "LOGIN HIDE  DENY  HIDE  HIDE  DENY  DENY  LOGIN",
        data={"reason": "the harness died"},
        json=True,
    ),
    Row(
        "api run turns", "GET", f"{AR}/turns", "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN", marker=MODEL
    ),
    Row(
        "api run metrics",
        "GET",
        f"{AR}/metrics?key=loss",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
        marker="loss",
    ),
    Row(
        "api run turns: CSV export",
        "GET",
        f"{AR}/turns?format=csv",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
        marker=MODEL,
    ),
    Row(
        "api run metrics: CSV export",
        "GET",
        f"{AR}/metrics?format=csv",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
        marker="loss",
    ),
    Row(
        "api run artifacts",
        "GET",
        f"{AR}/artifacts",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
        marker=ARTIFACT_PATH,
    ),
    Row(
        "api run artifacts: upload",
        "POST",
        f"{AR}/artifacts",
        "LOGIN HIDE  DENY  DENY  ALLOW ALLOW DENY  LOGIN",
        ok=201,
        data=upload,
        effect=count(Artifact),
    ),
    Row(
        "api run artifact download",
        "GET",
        f"{AR}/artifacts/{{artifact}}/download",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
        marker=ARTIFACT_BYTES.decode(),
    ),
    Row(
        "api run artifact download: another project's",
        "GET",
        f"{AR}/artifacts/{{o_artifact}}/download",
        "LOGIN HIDE  HIDE  HIDE  HIDE  HIDE  DENY  LOGIN",
    ),
    # What people write, over the API: readers (tokens too) read; tags are a harness's too; notes and
    # comments are a signed-in person's (reviewer), editing a comment its author's, deleting it its
    # author's or an admin's.
    Row(
        "api run: name and pin",
        "PATCH",
        f"{AR}",
        "LOGIN HIDE  DENY  ALLOW ALLOW ALLOW DENY  LOGIN",
        data={"display_name": "Matrix name", "pinned": True},
        json=True,
        effect=run_field("display_name"),
    ),
    Row(
        "api run note",
        "GET",
        f"{AR}/note",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
        marker=NOTE_TEXT,
    ),
    Row(
        "api run note: write",
        "PUT",
        f"{AR}/note",
        "LOGIN HIDE  DENY  ALLOW ALLOW DENY  DENY  LOGIN",
        data={"body": "matrix note"},
        json=True,
        effect=note_body,
    ),
    Row(
        "api run tags", "GET", f"{AR}/tags", "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN", marker=TAG_KEY
    ),
    Row(
        "api run tags: set",
        "POST",
        f"{AR}/tags",
        "LOGIN HIDE  DENY  ALLOW ALLOW ALLOW DENY  LOGIN",
        ok=201,
        data={"key": "matrix", "value": "1"},
        json=True,
        effect=count(RunTag),
    ),
    Row(
        "api run tag: remove",
        "DELETE",
        f"{AR}/tags/{TAG_KEY}",
        "LOGIN HIDE  DENY  ALLOW ALLOW ALLOW DENY  LOGIN",
        ok=204,
        effect=count(RunTag),
    ),
    Row(
        "api run comments",
        "GET",
        f"{AR}/comments",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
        marker=COMMENT_TEXT,
    ),
    Row(
        "api run comments: add",
        "POST",
        f"{AR}/comments",
        "LOGIN HIDE  DENY  ALLOW ALLOW DENY  DENY  LOGIN",
        ok=201,
        data={"body": "matrix comment"},
        json=True,
        effect=count(Comment),
    ),
    Row(
        "api run comment: edit",
        "PATCH",
        f"{AR}/comments/{{comment}}",
        "LOGIN HIDE  DENY  ALLOW DENY  DENY  DENY  LOGIN",
        data={"body": "matrix edit"},
        json=True,
        effect=comment_field("comment", "body"),
    ),
    Row(
        "api run comment: delete",
        "DELETE",
        f"{AR}/comments/{{comment}}",
        "LOGIN HIDE  DENY  ALLOW ALLOW DENY  DENY  LOGIN",
        ok=204,
        effect=comment_field("comment", "deleted_at"),
    ),
    Row(
        "api submission comments",
        "GET",
        f"{AS}/{{cand}}/comments",
        "LOGIN HIDE  ALLOW ALLOW ALLOW ALLOW DENY  LOGIN",
        marker=SUB_COMMENT_TEXT,
    ),
    Row(
        "api submission comments: another project's submission",
        "GET",
        f"{AS}/{{o_sub}}/comments",
        "LOGIN HIDE  HIDE  HIDE  HIDE  HIDE  DENY  LOGIN",
    ),
    Row(
        "api submission comments: add",
        "POST",
        f"{AS}/{{cand}}/comments",
        "LOGIN HIDE  DENY  ALLOW ALLOW DENY  DENY  LOGIN",
        ok=201,
        data={"body": "matrix comment"},
        json=True,
        effect=count(Comment),
    ),
    Row(
        "api submission comment: edit",
        "PATCH",
        f"{AS}/{{cand}}/comments/{{sub_comment}}",
        "LOGIN HIDE  DENY  ALLOW DENY  DENY  DENY  LOGIN",
        data={"body": "matrix edit"},
        json=True,
        effect=comment_field("sub_comment", "body"),
    ),
    Row(
        "api submission comment: delete",
        "DELETE",
        f"{AS}/{{cand}}/comments/{{sub_comment}}",
        "LOGIN HIDE  DENY  ALLOW ALLOW DENY  DENY  LOGIN",
        ok=204,
        effect=comment_field("sub_comment", "deleted_at"),
    ),
    # --- archive, delete, retention (docs/retention.md) ---------------------------------------------------
    Row(
        "run: archive",
        "POST",
        f"{P}/runs/{DONE_RUN}/archive",
        "LOGIN HIDE  DENY  ALLOW ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"action": "archive"},
        effect=done_run_field("archived_at"),
    ),
    Row(
        "run: archive another project's run",
        "POST",
        f"{P}/runs/{OTHER_RUN}/archive",
        "LOGIN HIDE  HIDE  HIDE  HIDE  LOGIN LOGIN LOGIN",
        data={"action": "archive"},
    ),
    Row(
        "run: archive by GET",
        "GET",
        f"{P}/runs/{DONE_RUN}/archive",
        "405   405   405   405   405   405   405   405",
    ),
    Row(
        "run: delete confirmation page",
        "GET",
        f"{P}/runs/{DONE_RUN}/delete",
        "LOGIN HIDE  DENY  DENY  ALLOW LOGIN LOGIN LOGIN",
        marker=DONE_RUN,
    ),
    Row(
        "run: delete",
        "POST",
        f"{P}/runs/{DONE_RUN}/delete",
        "LOGIN HIDE  DENY  DENY  ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"confirm": DONE_RUN},
        effect=count(Run),
    ),
    Row(
        "run: delete another project's run",
        "POST",
        f"{P}/runs/{OTHER_RUN}/delete",
        "LOGIN HIDE  DENY  DENY  HIDE  LOGIN LOGIN LOGIN",
        data={"confirm": OTHER_RUN},
    ),
    Row(
        "retention page",
        "GET",
        f"{P}/retention/",
        "LOGIN HIDE  DENY  DENY  ALLOW LOGIN LOGIN LOGIN",
        marker=PROJECT_NAME,
    ),
    Row(
        "retention: save the policy",
        "POST",
        f"{P}/retention/",
        "LOGIN HIDE  DENY  DENY  ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={
            "retention_metric_days": "30",
            "retention_keep_points": "500",
            "retention_archived_run_days": "",
        },
        effect=hill("retention_keep_points"),
    ),
    Row(
        "project: archive",
        "POST",
        f"{P}/archive",
        "LOGIN HIDE  DENY  DENY  ALLOW LOGIN LOGIN LOGIN",
        ok=302,
        data={"action": "archive"},
        effect=hill("archived_at"),
    ),
    Row("project: archive by GET", "GET", f"{P}/archive", "405   405   405   405   405   405   405   405"),
    Row(
        "project: delete confirmation page",
        "GET",
        f"{P}/delete",
        "LOGIN HIDE  DENY  DENY  ALLOW LOGIN LOGIN LOGIN",
        marker=PROJECT_NAME,
    ),
    # A wrong typed confirmation: the page again with the error, nothing deleted (a real deletion would
    # remove the world's artifact files, which no savepoint brings back; tests/dashboard covers it).
    Row(
        "project: delete with a wrong confirmation",
        "POST",
        f"{P}/delete",
        "LOGIN HIDE  DENY  DENY  400   LOGIN LOGIN LOGIN",
        data={"confirm": "not-hill"},
    ),
]

# URL patterns with no row, and why. (The single sign-on URLs, /oidc/login/ and /oidc/callback/, exist only
# when SMRWEB_OIDC_ISSUER is set — not here; their matrix is test_sso_urls_for_every_kind_of_caller in
# tests/test_oidc.py.)
EXCLUDED = {
    "admin/": "Django's admin (and its sign-in): staff only, its own login; not project access",
    "api/schema/": "the OpenAPI document: public by configuration (SERVE_PERMISSIONS AllowAny), no project "
    "data",
    "api/docs/": "Swagger UI for the schema: public, static, no project data",
}


# --- one cell --------------------------------------------------------------------------------------------


def _body(response) -> str:
    if getattr(response, "streaming", False):
        content = b"".join(response.streaming_content)  # the test client closes it (and keeps the DB open)
    else:
        content = response.content
    return content.decode("utf-8", "replace")


VERSION_RE = re.compile(r'"X-Smrweb-Version": "([0-9a-f]+)"')


def poll_version(row: Row, w: World, alice: APIClient) -> dict[str, str]:
    """The version the fragment shows a member: what a browser's next poll sends back (as headers). A page
    of live cards (the run page) sends the versions of all its cards (X-Smrweb-Cards)."""
    response = alice.get(row.path.format(**w.ids), headers={"HX-Request": "true"})
    assert response.status_code == 200, (row.name, response.status_code)
    body = _body(response)
    if "data-cards-poll" in body:  # the cards the page shows (some sit outside its live part)
        page = _body(alice.get(row.path.format(**w.ids)))
        cards = dict(re.findall(r'data-card="([^"]+)"\s+data-version="([^"]*)"', page))
        return {live.CARDS_HEADER: live.cards_header(cards)}
    found = VERSION_RE.search(body)
    assert found, f"{row.name}: the fragment carries no X-Smrweb-Version to poll with"
    return {live.VERSION_HEADER: found[1]}


def check_cell(
    row: Row, who: str, expected: str, client: APIClient, w: World, version: dict[str, str] | None
) -> list[str]:
    """Make the request in a savepoint that is rolled back; the problems with its answer (empty: as
    expected)."""
    for cache in caches.all():
        cache.clear()
    cookies = copy.deepcopy(client.cookies)  # a logout or a flash message must not follow into the next cell
    problems: list[str] = []
    with transaction.atomic():
        before, effect_before = fingerprint(), row.effect(w) if row.effect else None
        headers = {}
        if row.hx:
            headers["HX-Request"] = "true"
        if row.only:
            headers["X-Smrweb-Only"] = row.only
        if version:
            headers.update(version)
        data = row.data(w.ids) if callable(row.data) else row.data
        kwargs = {"format": "json"} if row.json else {}
        response = getattr(client, row.method.lower())(
            row.path.format(**w.ids), data, headers=headers, **kwargs
        )
        body = _body(response)
        after, effect_after = fingerprint(), row.effect(w) if row.effect else None
        transaction.set_rollback(True)
    client.cookies = cookies

    status = response.status_code
    location = response.get("Location", "")
    if expected == "ALLOW":
        wanted = row.ok if isinstance(row.ok, tuple) else (row.ok,)
        if status not in wanted:
            problems.append(f"status {status}, expected {wanted}")
        if status == 302 and location.startswith("/login/"):
            problems.append("sent to the login page")
    elif expected == "LOGIN":
        if row.api and status != 401:
            problems.append(f"status {status}, expected 401")
        if not row.api and not (status == 302 and location.startswith("/login/")):
            problems.append(f"status {status} {location!r}, expected a redirect to /login/")
    elif expected in ("DENY", "HIDE", "EMPTY") or expected.isdigit():
        wanted = {"DENY": 403, "HIDE": 404, "EMPTY": 200}.get(expected) or int(expected)
        if status != wanted:
            problems.append(f"status {status}, expected {wanted}")
    else:
        raise AssertionError(f"{row.name}: unknown answer {expected!r}")

    if expected == "ALLOW" and row.effect:
        if effect_after == effect_before:
            problems.append(f"allowed, but the effect did not happen ({effect_before!r} stayed)")
    elif before != after or effect_before != effect_after:
        problems.append("refused or read-only, yet something was written")
    if expected == "ALLOW" and row.marker and row.marker not in body:
        problems.append(f"allowed, but {row.marker!r} is not in the answer")
    if expected == "EMPTY" and row.marker and row.marker in body:
        problems.append(f"{row.marker!r} is shown")
    if (
        who not in HILL_READERS
    ):  # whatever the answer, nothing of hill but what the row hands out (a link's bytes)
        problems += [
            f"leaks {s!r}"
            for s in HILL_SECRETS
            if s in body and not (expected == "ALLOW" and s == row.marker)
        ]
    elif expected in ("LOGIN", "HIDE"):
        problems += [f"leaks {s!r}" for s in HILL_SECRETS if s in body]
    if who != "other":
        problems += [f"leaks the other project's {s!r}" for s in OTHER_SECRETS if s in body]
    if expected == "ALLOW" and row.hx and status == 200 and "<html" in body:
        problems.append("an htmx request got the whole page, not the fragment")
    if row.api and status >= 400:
        try:
            shape = set(json.loads(body))
        except ValueError:
            shape = None
        wanted_shape = (
            {"error_code", "message"} if row.path.startswith("/mlflow/") else {"code", "message", "errors"}
        )
        if shape != wanted_shape:
            problems.append(f"the API error is not the JSON error shape: {body[:120]!r}")
    return [f"{who:8} expected {expected:6} got {status}: {p}" for p in problems]


# --- the tests -------------------------------------------------------------------------------------------

CELLS_CHECKED: list[tuple[str, str]] = []
_as_is = contextlib.nullcontext


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_matrix_row(row: Row, world: World):
    answers = row.answers()
    by_principal = world.clients
    # An unchanged poll is unchanged at one instant: a live card moves with the clock (a budget's forecast,
    # the timeline's end), so the clock stands still while a poll row reads its versions and polls.
    with time_machine.travel(timezone.now(), tick=False) if row.poll else _as_is():
        version = poll_version(row, world, by_principal["alice"]) if row.poll else None
        problems = []
        for who in PRINCIPALS:
            mine = version
            if row.poll and answers[who] == "204" and who != "alice":
                mine = poll_version(row, world, by_principal[who])  # cards differ by role: each polls its own
            problems += check_cell(row, who, answers[who], by_principal[who], world, mine)
            CELLS_CHECKED.append((row.name, who))
    assert not problems, f"{row.method} {row.path}\n" + "\n".join(problems)


def _routes(patterns, prefix: str = "") -> list[str]:
    out = []
    for p in patterns:
        route = prefix + str(p.pattern)
        if route.startswith(tuple(EXCLUDED)):
            continue
        if isinstance(p, URLResolver):
            out += _routes(p.url_patterns, route)
        elif isinstance(p, URLPattern):
            out.append(route)
    return out


class _AnyId(dict):
    def __missing__(self, key):
        if key.startswith("share_"):
            return "/s/" + "x" * 43 + "/"
        if key.startswith(("link", "bundle_")):
            return f"/{'b' if key.startswith('bundle_') else 'a'}/1.a." + "x" * 43 + "/"
        return "1"


def test_every_url_pattern_has_a_row():
    """A new URL pattern without a matrix row fails here (excluded ones are named with a reason)."""
    routes = _routes(get_resolver().url_patterns)
    covered = {resolve(row.path.format_map(_AnyId()).split("?")[0]).route for row in ROWS}
    missing = sorted(set(routes) - covered)
    assert not missing, f"URL patterns without a row in the permission matrix: {missing}"
    assert covered <= set(routes)  # every row's path is a real pattern (and not an excluded one)
    assert len(routes) >= 45  # the enumeration did walk the included URL confs


HTMX_ATTR = re.compile(r'(?:hx-(?:get|post|put|patch|delete)|data-click-url)="([^"]*)"')
URL_TAG = re.compile(r"""^\{%\s*url\s+'([\w:-]+)'""")
SELF_URL = {
    "{{ run.get_absolute_url }}": "dashboard:run-detail",
    "{{ project.get_absolute_url }}": "dashboard:project-detail",
}


def htmx_endpoints() -> set[str]:
    """The URL names the templates fetch with htmx (hx-get/hx-post…, and the timeline's data-click-url)."""
    names, unread = set(), []
    for template in (ROOT / "templates").rglob("*.html"):
        for value in HTMX_ATTR.findall(template.read_text()):
            if found := URL_TAG.match(value):
                names.add(found[1])
            elif own := next((name for prefix, name in SELF_URL.items() if value.startswith(prefix)), None):
                names.add(own)
            else:
                unread.append(f"{template.name}: {value}")
    assert not unread, f"htmx URLs this test cannot map to a URL name (teach it): {unread}"
    return names


def test_every_htmx_endpoint_in_the_templates_has_an_hx_row():
    """Partials re-check access: every URL a template fetches with htmx has a row sent as htmx."""
    names = htmx_endpoints()
    assert len(names) >= 9, (
        names
    )  # project list/detail/chart, run detail/metric/turns/turn, submission, preflight
    hx_rows = {resolve(r.path.format_map(_AnyId()).split("?")[0]).view_name for r in ROWS if r.hx}
    assert not names - hx_rows, f"htmx endpoints without an HX-Request row: {sorted(names - hx_rows)}"


def test_matrix_summary(request, capsys):
    """Runs last: how many cells were checked (all of them when the whole module ran)."""
    total = len(ROWS) * len(PRINCIPALS)
    rows_run = [
        i for i in request.session.items if i.path == request.path and i.originalname == "test_matrix_row"
    ]
    if len(rows_run) != len(ROWS):
        pytest.skip("only part of the matrix was selected")
    assert len(CELLS_CHECKED) == total == len(set(CELLS_CHECKED))
    with capsys.disabled():
        print(f"\npermission matrix: {len(ROWS)} rows x {len(PRINCIPALS)} principals = {total} cells checked")
