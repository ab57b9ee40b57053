"""The safety net of the run page's live cards (`RunPage` in dashboard/views/runs.py): each card's version is
written by hand apart from its markup, and a poll re-renders a card only when its version moves. So for one
input at a time (a new turn, a score, a setting, a role, …) this renders every card before and after, and
fails when a card's render changed while its version did not: a forgotten input is a red test here, not a
stale page. Every change must move at least one render, so none of them is a no-op that proves nothing."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.contrib.messages.storage.fallback import FallbackStorage
from django.contrib.sessions.backends.db import SessionStore
from django.test import RequestFactory

from smrweb.dashboard import live
from smrweb.dashboard.views.runs import CARDS, RunPage
from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import Checkpoint, Project, Role, Run, Submission
from smrweb.tracking.services import rollbacks, submissions

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)  # when the cards render
BUILT = NOW - timedelta(minutes=20)  # when the world was written
CHANGED = NOW - timedelta(minutes=10)  # when the one input changed: as on a real clock, between the two
HOOK = "https://hooks.example/hill"


def push(project, *events: dict) -> None:
    services.ingest_events(project, "r1", parse_events(json.dumps(list(events))))


def at(minutes: float) -> str:
    return (NOW - timedelta(minutes=minutes)).isoformat()


@pytest.fixture
def world(project):
    """A live push run with something in every card: turns of two actors, scores, a message, a checkpoint,
    a metric, an artifact, state changes."""
    with time_machine.travel(BUILT, tick=False):
        services.update_project(project, rollback_webhook_url=HOOK)
        push(
            project,
            {"type": "state", "state": "running", "ts": at(60)},
            *(
                {
                    "type": "agent.turn",
                    "turn": n,
                    "actor": "driver" if n % 2 else "worker-1",
                    "cost_usd": 0.01 * n,
                    "tokens_in": 100 * n,
                    "tokens_out": 10,
                    "ts": at(50 - n),
                }
                for n in range(1, 8)
            ),
            {"type": "score", "score": 0.4, "ts": at(40)},
            {"type": "score", "score": 0.6, "ts": at(30)},
            {"type": "message", "body": "first note", "ts": at(35)},
            {"type": "checkpoint", "id": "c1", "label": "first", "ts": at(33)},
            {"type": "metric", "key": "loss", "step": 1, "value": 0.9, "ts": at(32)},
        )
        services.store_artifact(project, "r1", path="out/a.txt", content=io.BytesIO(b"a"))
    return project


def run_of() -> Run:
    return Run.objects.select_related("project__scenario").get(external_id="r1")


def rendered(user, query: str = "?key=loss") -> dict[str, tuple[str, str]]:
    """Every card the page shows to `user`: its version and its render, at a frozen clock."""
    request = RequestFactory().get(f"/projects/hill/runs/r1/{query}")
    request.user, request.session, request.htmx = user, SessionStore(), False
    request._messages = FallbackStorage(request)
    with time_machine.travel(NOW, tick=False):
        page = RunPage(request, run_of())
        deck = page.deck(CARDS)
        return {card.name: (card.version, card.render()) for card in deck.cards.values()}


def _turn(p, **_):
    push(p, {"type": "agent.turn", "turn": 8, "actor": "driver", "cost_usd": 0.5, "ts": at(15)})


def _turn_body_only(p, **_):  # a new turn of the other actor: the actors card's rows
    push(p, {"type": "agent.turn", "turn": 9, "actor": "worker-2", "parent_actor": "driver", "ts": at(14)})


def _score(p, **_):
    push(p, {"type": "score", "score": 0.9, "ts": at(13)})


def _message(p, **_):
    push(p, {"type": "message", "body": "second note", "ts": at(13)})


def _checkpoint(p, **_):
    push(p, {"type": "checkpoint", "id": "c2", "label": "second", "ts": at(13)})


def _metric(p, **_):
    push(p, {"type": "metric", "key": "loss", "step": 2, "value": 0.5, "ts": at(13)})


def _state(p, **_):
    push(p, {"type": "state", "state": "paused", "ts": at(12)})


def _artifact(p, **_):
    services.store_artifact(p, "r1", path="out/b.txt", content=io.BytesIO(b"b"))


def _budget(p, **_):
    services.update_run_settings(p, "r1", budget_usd=Decimal("5"))


def _profile(p, **_):
    services.update_run_settings(p, "r1", requested_profile="codex_high")


def _display_name(p, bob, **_):
    services.update_run_labels(run_of(), by=bob, display_name="The good one")


def _pin(p, bob, **_):
    services.update_run_labels(run_of(), by=bob, pinned=True)


def _tag(p, bob, **_):
    services.set_tag(run_of(), key="lr", value="3e-4", by=bob)


def _snooze(p, bob, **_):
    services.snooze_run(run_of(), by=bob, hours=4)


def _exclude_run(p, alice, **_):
    submissions.exclude_run(run_of(), by=alice, reason="leaked test set")


def _exclude_score(p, alice, **_):
    submissions.exclude_submission(Submission.objects.order_by("ts").first(), by=alice, reason="a fluke")


def _rollback(p, bob, **_):
    rollbacks.request_rollback(by=bob, reason="back", checkpoint=Checkpoint.objects.get())


def _steer(p, bob, **_):
    services.request_control(run_of(), by=bob, kind="message", body="try smaller steps")


def _no_webhook(p, **_):
    services.update_project(p, rollback_webhook_url="")


def _stall_after(p, **_):
    services.update_project(p, stall_after=timedelta(minutes=1))


def _regression_threshold(p, **_):
    services.update_project(p, regression_threshold=0.01)


def _role(p, alice, **_):
    services.set_member(p, username="bob", role=Role.VIEWER, by=alice)


def _admin(p, alice, **_):
    services.set_member(p, username="bob", role=Role.ADMIN, by=alice)


def _source(p, **_):
    Project.objects.filter(pk=p.pk).update(source="git", git_repo_path="/r", git_branch="b")


CHANGES: dict[str, Callable] = {
    f.__name__.strip("_"): f
    for f in (
        _turn,
        _turn_body_only,
        _score,
        _message,
        _checkpoint,
        _metric,
        _state,
        _artifact,
        _budget,
        _profile,
        _display_name,
        _pin,
        _tag,
        _snooze,
        _exclude_run,
        _exclude_score,
        _rollback,
        _steer,
        _no_webhook,
        _stall_after,
        _regression_threshold,
        _role,
        _admin,
        _source,
    )
}


def test_the_same_state_renders_the_same_cards_and_every_card_is_checked(world, bob):
    first = rendered(bob)
    assert set(first) == set(CARDS)  # the world fills every card, the metric panel and Steer included
    assert first == rendered(bob)


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_card_whose_render_changes_changes_its_version(world, alice, bob, change):
    before = rendered(bob)
    with time_machine.travel(CHANGED, tick=False):
        CHANGES[change](world, alice=alice, bob=bob)
    after = rendered(bob)
    moved = [name for name in before.keys() & after.keys() if before[name][1] != after[name][1]]
    assert moved or before.keys() != after.keys(), f"{change} changed no card: it tests nothing"
    stale = [name for name in moved if before[name][0] == after[name][0]]
    assert stale == [], f"{change}: these cards render differently under the same version: {stale}"


# --- parts with versions of their own (issue 36): a poll renders them alone when only their versions moved


def laid_out(user) -> dict[str, tuple[str, dict[str, tuple[str, str, str | None]], str]]:
    """Every card with parts (`RunPage.PARTS`): its skeleton's version; each part's version, its render alone
    and what the card's render has between its markers; the card's render outside its parts and marker."""
    request = RequestFactory().get("/projects/hill/runs/r1/?key=loss")
    request.user, request.session, request.htmx = user, SessionStore(), False
    request._messages = FallbackStorage(request)
    out = {}
    with time_machine.travel(NOW, tick=False):
        page = RunPage(request, run_of())
        for card in page.deck(CARDS).cards.values():
            if card.layout is None:
                continue
            skeleton, parts = card.laid_out
            html = card.render()
            # A part: an element (`<!--p:ID-->`), a figure (`<!--f:ID-->`), a list of rows (`<!--rows:ID-->`).
            shown = {m[2]: m[3] for m in live.PART.finditer(html)} | {
                m[1]: m[2] for m in live.ROWS.finditer(html)
            }
            own = {*parts, f"{card.name}--v"}
            outside = live.ROWS.sub(lambda m, own=own: f"<!--rows:{m[1]}-->" if m[1] in own else m[0], html)
            outside = live.PART.sub(lambda m, own=own: "" if m[2] in own else m[0], outside)
            out[card.name] = (
                skeleton,
                {i: (p.version, p.render(), shown.get(i)) for i, p in parts.items()},
                outside,
            )
    return out


def test_each_part_renders_alone_as_its_card_shows_it(world, bob):
    cards = laid_out(bob)
    assert set(cards) == set(RunPage.PARTS)
    # The stats' parts and the two actors' rows (the "no progress" parts show after 50 turns without a
    # better score: tests/dashboard/test_run_poll_parts.py has them).
    assert cards["run-stats"][1] and cards["run-actors"][1]
    for name, (_, parts, _) in cards.items():
        for part, (_, alone, shown) in parts.items():
            assert alone == shown, (name, part)


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_part_or_skeleton_whose_render_changes_changes_its_version(world, alice, bob, change):
    """What a part-wise answer relies on: a part whose version stayed renders the same, and so does all of a
    card outside its parts when its skeleton's version stayed."""
    before = laid_out(bob)
    with time_machine.travel(CHANGED, tick=False):
        CHANGES[change](world, alice=alice, bob=bob)
    after = laid_out(bob)
    for name in before.keys() & after.keys():
        (skeleton, parts, outside), (skeleton2, parts2, outside2) = before[name], after[name]
        if skeleton == skeleton2:
            assert outside == outside2, f"{change}: {name}'s skeleton rendered differently under one version"
            assert parts.keys() == parts2.keys(), (change, name)
        for part in parts.keys() & parts2.keys():
            if parts[part][0] == parts2[part][0]:
                assert parts[part][1] == parts2[part][1], (
                    f"{change}: {name}'s {part}, same version, new render"
                )
