"""Every list page and polled or clicked partial makes the same number of queries with a little data
and with ten times more (runs, turns, points, entries, tokens…), and an unchanged poll (204) stays
within a couple of queries: a later change cannot bring back N+1 queries unnoticed.

Counts, not times: each row measures a small world, grows it, and measures again."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from smrweb.dashboard import live
from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.models import AgentTurn, Submission
from smrweb.tracking.services import knowledge, submissions
from tests.factories import UserFactory, admin_project

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, tzinfo=UTC)
HX = {"HX-Request": "true"}


def push(project, run_id: str, *events: dict) -> None:
    services.ingest_events(project, run_id, parse_events(json.dumps(list(events))))


def grow_run(project, run_id: str, n: int, start: int = 0) -> None:
    """n turns (driver and nested children, with tool calls), n/10 scores, n metric points, messages."""
    events: list[dict] = []
    for i in range(start, start + n):
        ts = (T0 + timedelta(seconds=i)).isoformat()
        actor, parent = ("driver", None) if i % 3 else (f"w{i % 7}", "driver")
        events.append(
            {
                "type": "agent.turn",
                "turn": i,
                "actor": actor,
                "parent_actor": parent,
                "tokens_in": 100 + i,
                "tokens_out": 10,
                "cost_usd": 0.001,
                "ts": ts,
                "tool_calls": [{"name": "bash", "arguments": {"cmd": f"make {i}"}}],
            }
        )
        events.append(
            {"type": "metric", "id": f"m{i}", "key": "loss", "value": 1 / (i + 1), "step": i, "ts": ts}
        )
        # Every turn says something: the run page's message list (20 and the kickoff) is full
        # in the small world too, so both worlds take the same branches.
        events.append({"type": "message", "body": f"note {i}", "topic": "agent", "ts": ts})
        if i % 10 == 0:
            events.append({"type": "score", "score": i / 1000, "ts": ts})
            events.append(
                {"type": "checkpoint", "label": f"c{i}", "commit": f"{i:07x}", "restorable": True, "ts": ts}
            )
    for chunk in range(0, len(events), 4000):
        push(project, run_id, *events[chunk : chunk + 4000])


def count(client, url: str, headers: dict | None = None, expect: int = 200) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, headers=headers or {})
    assert response.status_code == expect, (url, response.status_code)
    return len(queries.captured_queries)


def version_of(client, url: str) -> str:
    body = client.get(url, headers=HX).content.decode()
    return re.search(r'"X-Smrweb-Version": "([0-9a-f]+)"', body).group(1)


def poll_headers(client, url: str) -> dict:
    """What the page's poll sends: the versions of its live cards (the run page), else the version its
    polled fragment carries."""
    page = client.get(url).content.decode()
    if "data-cards-poll" in page:
        cards = dict(re.findall(r'data-card="([^"]+)"\s+data-version="([^"]*)"', page))
        return {**HX, live.CARDS_HEADER: live.cards_header(cards)}
    return {**HX, live.VERSION_HEADER: version_of(client, url)}


@pytest.fixture
def frozen():
    # Poll versions carry a 30-second tick: keep it from turning between two requests of a test.
    with time_machine.travel(datetime(2026, 11, 22, 12, 0, 5, tzinfo=UTC), tick=False):
        yield


def submission_of(project, run_id: str, alice) -> Submission:
    return Submission.objects.filter(run__project=project, run__external_id=run_id).order_by("pk").first()


# --- the table ------------------------------------------------------------------------------------
# Each row: a URL (formatted with the world's ids), headers, the status, a cap, and how to grow the
# world tenfold (or more) between the two measurements.


def grow_projects(world) -> None:
    for i in range(12):
        p = admin_project(f"more{i}", by=world["alice"])
        grow_run(p, "r", 5)


def grow_runs(world) -> None:
    for i in range(1, 25):
        grow_run(world["project"], f"r{i}", 5)
        if (
            i % 2
        ):  # over budget (USD, or tokens), and a worker downgraded: badges, filters and searches find them
            services.update_run_settings(
                world["project"], f"r{i}", budget_usd="0.001", budget_tokens=100 if i % 4 == 1 else None
            )
            services.record_poll(
                world["project"],
                f"r{i}",
                actor_profiles=[
                    {"role": "worker", "actor": f"w{i}", "requested": "gpt-big", "actual": "gpt-small"}
                ],
            )


def grow_turns(world) -> None:
    grow_run(world["project"], "r0", 400, start=20)


def grow_entries(world) -> None:
    for i in range(40):
        knowledge.add_entry(
            world["project"], kind="note", title=f"idea {i}", body=f"tried {i}", by=world["alice"]
        )


def grow_tokens(world) -> None:
    for i in range(30):
        token, _ = services.create_api_token(world["project"], name=f"harness {i}", by=world["alice"])
        if i % 2:
            services.revoke_api_token(token, by=world["alice"])


def grow_shares(world) -> None:
    """Share links by two people, some revoked (the list reads the admin role once, not per link)."""
    project, alice = world["project"], world["alice"]
    bob = project.memberships.get(role="reviewer").user
    for i in range(30):
        by = bob if i % 2 else alice
        link, _ = services.create_share_link(by=by, kind="tree", days=1 + i % 3, project=project)
        if i % 5 == 0:
            services.revoke_share_link(link, by=alice)


def grow_members(world) -> None:
    """More members and more pending invitations (the Members tab's two tables)."""
    project, alice = world["project"], world["alice"]
    for i in range(15):
        services.add_member(project, UserFactory(username=f"teammate{i}"), role="viewer", by=alice)
        services.invite_member(project, email=f"invitee{i}@example.org", role="reviewer", by=alice)


def grow_alerts(world) -> None:
    """More rules, each with more notifications than its delivery log shows; more in alice's inbox."""
    for trigger in ("run.stalled", "run.loop", "run.budget", "score.new_best", "source.failing"):
        rule = services.create_alert_rule(
            world["project"], by=world["alice"], trigger=trigger, channel="inbox", recipient="alice"
        )
        for _ in range(25):
            services.send_test(rule, by=world["alice"])


def grow_history(world) -> None:
    """More runs with verified, reviewed and ranked submissions (the queue, the page's history)."""
    grow_runs(world)


ROWS: dict[str, tuple[str, dict, int, int, Callable]] = {
    # name: (url, headers, status, cap, grow)
    "overview": ("/", {}, 200, 20, grow_projects),
    "overview poll": ("/", HX, 200, 20, grow_projects),
    "project page": ("/projects/hill/", {}, 200, 30, grow_runs),
    "project poll": ("/projects/hill/", HX, 200, 25, grow_runs),
    "project poll, filtered": ("/projects/hill/?q=r1&stalled=1", HX, 200, 25, grow_runs),
    "project poll, sorted": ("/projects/hill/?sort=-spend&page=1", HX, 200, 25, grow_runs),
    "project poll, over budget": ("/projects/hill/?over_budget=true&sort=best", HX, 200, 25, grow_runs),
    "project poll, model search": ("/projects/hill/?q=gpt", HX, 200, 25, grow_runs),
    "project poll, downgraded": ("/projects/hill/?q=downgraded", HX, 200, 26, grow_runs),
    "project chart": ("/projects/hill/chart/", HX, 200, 12, grow_runs),
    # The page (not its poll) also reads the run's note and comments; page and poll read its tags and
    # its lineage (parent and next runs, one query); 39: also the Steer card's requests; 40: the Params card;
    # 41: the live cards' markers (one query). The whole live part (an htmx request that is not a poll) reads
    # what the page reads of it; a pager reads its list's card and the other list's (whose page links carry
    # the new page too). The poll is below.
    "run page": ("/projects/hill/runs/r0/", {}, 200, 41, grow_turns),
    "run live part": ("/projects/hill/runs/r0/", HX, 200, 36, grow_turns),
    "run page, older turns": (
        "/projects/hill/runs/r0/?turns_page=2&artifacts_page=2",
        {},
        200,
        41,
        grow_turns,
    ),
    "run live part, older turns": ("/projects/hill/runs/r0/?turns_page=2", HX, 200, 36, grow_turns),
    "run turns pager": (
        "/projects/hill/runs/r0/?turns_page=2",
        {**HX, "X-Smrweb-Only": "turns-card"},
        200,
        12,
        grow_turns,
    ),
    "metric panel": ("/projects/hill/runs/r0/metrics/?key=loss", HX, 200, 12, grow_turns),
    "metric panel against spend": ("/projects/hill/runs/r0/metrics/?key=loss&x=usd", HX, 200, 14, grow_turns),
    "turns of a bar": (
        "/projects/hill/runs/r0/turns/?origin={origin}&width_us=60000000&bin=0&kind=d",
        HX,
        200,
        10,
        grow_turns,
    ),
    "turn detail": ("/projects/hill/runs/r0/turns/{turn}/", HX, 200, 10, grow_turns),
    "submission page": ("/projects/hill/submissions/{submission}/", {}, 200, 25, grow_history),
    "review queue": ("/projects/hill/review/", {}, 200, 20, grow_history),
    "knowledge": ("/projects/hill/knowledge/", {}, 200, 23, grow_entries),  # 3 of them the arena history
    "tokens": ("/projects/hill/tokens/", {}, 200, 12, grow_tokens),
    "share links": ("/projects/hill/shares/", {}, 200, 12, grow_shares),
    "shared tree": ("/s/{shared_tree}/", {}, 200, 11, grow_runs),
    "shared comparison": ("/s/{shared_compare}/", {}, 200, 10, grow_turns),
    "settings": ("/projects/hill/settings/", {}, 200, 12, grow_runs),
    "members": ("/projects/hill/members/", {}, 200, 12, grow_members),
    "alerts": ("/projects/hill/alerts/", {}, 200, 12, grow_alerts),
    "inbox": ("/inbox/", {}, 200, 10, grow_alerts),
    "scenario": ("/scenarios/{scenario}/", {}, 200, 12, grow_projects),
    "compare": ("/projects/hill/compare/?runs=r0,r1,r2", {}, 200, 20, grow_turns),
}


@pytest.fixture
def world(project, alice, frozen):
    grow_run(project, "r0", 20)
    for i in (1, 2):
        grow_run(project, f"r{i}", 5)
    # One run over budget with a downgraded worker, so the filtered and searched tables are not empty
    # in the small world either (an empty table skips the per-page queries).
    services.update_run_settings(project, "r1", budget_usd="0.001")
    services.record_poll(
        project,
        "r1",
        actor_profiles=[{"role": "worker", "actor": "w", "requested": "gpt-big", "actual": "gpt-small"}],
    )
    # A rule with a notification in alice's inbox: the bell, the Alerts tab and the inbox read something.
    rule = services.create_alert_rule(
        project, by=alice, trigger="run.failed", channel="inbox", recipient="alice"
    )
    services.send_test(rule, by=alice)
    # Read-only share links of the tree and of the comparison (the public page, no session).
    _, tree = services.create_share_link(by=alice, kind="tree", days=7, project=project)
    _, compared = services.create_share_link(
        by=alice, kind="compare", days=7, project=project, query="runs=r0&runs=r1&runs=r2"
    )
    return {"project": project, "alice": alice, "shared": {"tree": tree, "compare": compared}}


def ids(world) -> dict:
    project = world["project"]
    first = AgentTurn.objects.filter(run__external_id="r0", run__project=project).order_by("ts", "pk").first()
    return {
        "origin": T0.isoformat().replace("+00:00", "Z"),
        "turn": first.pk,
        "submission": submission_of(project, "r0", world["alice"]).pk,
        "scenario": project.scenario.key,
        "shared_tree": world["shared"]["tree"],
        "shared_compare": world["shared"]["compare"],
    }


@pytest.mark.parametrize("name", list(ROWS))
def test_queries_stay_flat_as_the_data_grows(name, world, client_alice):
    url, headers, status, cap, grow = ROWS[name]
    url = url.format(**ids(world))
    small = count(client_alice, url, headers, status)
    grow(world)
    large = count(client_alice, url, headers, status)
    assert small <= cap, f"{name}: {small} queries (cap {cap})"
    assert large <= small, f"{name}: {small} queries with a little data, {large} with ten times more"


POLLS = {
    # name: (url, the query count an unchanged poll may make at most: the session and its user, the
    # project and the person's role, then the one small query its version needs; the run page's cards also
    # read the person's role once more, for their buttons, then their markers in one query)
    "overview": ("/", 5),
    "project": ("/projects/hill/", 6),
    # The chart: its drawn runs' submission markers too (one grouped query), which a turn leaves alone.
    "project chart": ("/projects/hill/chart/", 7),
    "run": ("/projects/hill/runs/r0/", 7),
    "run, older turns": ("/projects/hill/runs/r0/?turns_page=2", 7),
    "run, with its metric": ("/projects/hill/runs/r0/?key=loss", 7),
    "project, sorted and filtered": ("/projects/hill/?sort=-turns&over_budget=true", 6),
}


@pytest.mark.parametrize("name", list(POLLS))
def test_an_unchanged_poll_answers_204_in_a_few_queries_whatever_the_data(name, world, client_alice):
    url, cap = POLLS[name]
    push(world["project"], "r0", {"type": "state", "state": "running"})  # a live run keeps polling
    small = count(client_alice, url, poll_headers(client_alice, url), expect=204)
    grow_runs(world)
    grow_turns(world)
    large = count(client_alice, url, poll_headers(client_alice, url), expect=204)
    assert small <= cap and large <= small, (name, small, large)


def test_a_poll_after_a_new_turn_reads_as_much_whatever_the_runs_length(world, client_alice):
    """The run page's poll when a turn arrived: the changed cards (title, stats, timeline, budget, actors,
    turns) are read and rendered; the unchanged ones are not."""
    url = "/projects/hill/runs/r0/?key=loss"

    def after_a_turn(n: int) -> int:
        headers = poll_headers(client_alice, url)
        push(world["project"], "r0", {"type": "agent.turn", "turn": n, "actor": "driver", "tokens_in": 5})
        return count(client_alice, url, headers)

    small = after_a_turn(10_000)
    grow_turns(world)
    large = after_a_turn(10_001)
    assert small <= 25 and large <= small, (small, large)


def test_submission_poll_while_verifying_is_flat(world, client_alice, alice, bob):
    project = world["project"]
    sub = submission_of(project, "r0", alice)
    submissions.request_verification(sub, by=bob)
    url = f"/projects/hill/submissions/{sub.pk}/"
    headers = {**HX, "X-Smrweb-Version": version_of(client_alice, url)}
    small = count(client_alice, url, headers, expect=204)
    for i in range(20):
        submissions.record_progress(sub.pk, f"checked {i}")
    changed = count(client_alice, url, HX)
    headers = {**HX, "X-Smrweb-Version": version_of(client_alice, url)}
    assert count(client_alice, url, headers, expect=204) <= small <= 7
    assert changed <= 25
