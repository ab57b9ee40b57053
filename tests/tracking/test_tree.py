"""The tree of attempts (issue 39, queries/tree.py): an edge from each source — a launch, an SMR branch from a
checkpoint, an MLflow nested run (tests/mlflow/test_tree_nested.py, with the real client), a rollback —,
dead branches and the path to the best, the runs filter, and a fixed number of queries at any size."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from urllib.parse import urlencode

import pytest
from django.db import connection
from django.http import QueryDict
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from smrweb.sources import apply as applying
from smrweb.sources.smr import SmrConnector
from smrweb.tracking import services
from smrweb.tracking.events import parse_events
from smrweb.tracking.filters import RunFilter
from smrweb.tracking.models import Role, Run, RunLaunch, Submission, VerificationOutcome
from smrweb.tracking.queries import tree as trees
from smrweb.tracking.services import dispatched, launches, rollbacks
from smrweb.tracking.services import submissions as lifecycle
from tests.factories import admin_project

pytestmark = pytest.mark.django_db


def ingest(project, run_id: str, *events: dict):
    return services.ingest_events(project, run_id, parse_events(json.dumps(list(events))))


def scored(project, run_id: str, value: float, *, verify: bool = True, by=None) -> Submission:
    ingest(project, run_id, {"type": "score", "id": f"s-{uuid.uuid4().hex[:8]}", "score": value})
    sub = Submission.objects.filter(project=project, run__external_id=run_id).order_by("-id").first()
    if verify:
        lifecycle.request_verification(sub, by=by)
        sub = lifecycle.record_verification(
            sub.pk, lifecycle.VerificationResult(VerificationOutcome.PASSED, 0, "ok", "passed")
        )
    return sub


def launched(project, by, from_id: str, run_id: str) -> Run:
    """The next run, started from `from_id` the way the dashboard does: a launch, the harness's answer,
    then the run's first events."""
    launch, _ = launches.request_launch(
        project,
        by=by,
        from_run=Run.objects.get(project=project, external_id=from_id),
        kickoff="go on",
        idempotency_key=str(uuid.uuid4()),
    )
    dispatched.start_attempt(RunLaunch, launch.pk)
    launches.record_accepted(launch.pk, external_run_id=run_id, detail="HTTP 200")
    ingest(project, run_id, {"type": "state", "id": "st", "state": "running"})
    return Run.objects.get(project=project, external_id=run_id)


@pytest.fixture
def hooked(project):
    """A push project with a webhook: it can start runs and roll them back."""
    services.update_project(project, rollback_webhook_url="https://hooks.example/hill")
    ingest(project, "root", {"type": "state", "id": "st", "state": "running"})
    return project


def by_name(tree) -> dict:
    return {n.run.external_id: n for n in tree.nodes.values()}


def test_a_launch_is_an_edge_from_the_run_it_was_started_from(hooked, bob):
    launched(hooked, bob, "root", "next-1")
    launched(hooked, bob, "root", "next-2")
    launched(hooked, bob, "next-1", "next-1-1")
    tree = trees.project_tree(hooked)
    nodes = by_name(tree)
    assert [tree.nodes[r].run.external_id for r in tree.roots] == ["root"]
    assert (nodes["next-1"].parent, nodes["next-1"].kind) == (nodes["root"].pk, "launch")
    assert nodes["next-1-1"].parent == nodes["next-1"].pk
    assert sorted((tree.nodes[e.parent].run.external_id, tree.nodes[e.child].run.external_id, e.kind)
                  for e in tree.edges) == [
        ("next-1", "next-1-1", "launch"),
        ("root", "next-1", "launch"),
        ("root", "next-2", "launch"),
    ]  # fmt: skip
    assert nodes["root"].size == 4 and nodes["next-1"].size == 2


def test_an_smr_branch_from_a_checkpoint_is_an_edge_to_the_run_that_holds_it(project):
    """The SMR connector's checkpoints (the SDK's own parsing of the wire) carry `parent_checkpoint_id`:
    within a run it names the run's previous checkpoint; a branched run's first names the checkpoint of
    the run it was branched from."""
    from managed_research.models.checkpoints import Checkpoint as SdkCheckpoint

    def wire(run_id, cid, parent, at):
        return SdkCheckpoint.from_wire(
            {
                "checkpoint_id": cid, "run_id": run_id, "project_id": "p", "captured_at": at,
                "parent_checkpoint_id": parent, "state": "ready", "restorable": True,
                "metadata": {"label": f"improvement {cid}"},
            }
        )  # fmt: skip

    connector = SmrConnector(project, api_key="k", backend_base="https://smr.example")
    streams = {
        "a": [
            wire("a", "ca1", None, "2026-01-01T00:00:00Z"),
            wire("a", "ca2", "ca1", "2026-01-01T01:00:00Z"),
        ],
        # b branched from a's first checkpoint, then went on with its own
        "b": [
            wire("b", "cb1", "ca1", "2026-01-02T00:00:00Z"),
            wire("b", "cb2", "cb1", "2026-01-02T01:00:00Z"),
        ],
    }
    for run_id, checkpoints in streams.items():
        events = connector._checkpoints(checkpoints, {}, {})
        applying.apply_events(project, run_id, list(enumerate(events)), via="test")
    tree = trees.project_tree(project)
    nodes = by_name(tree)
    assert (nodes["b"].parent, nodes["b"].kind, nodes["b"].via) == (
        nodes["a"].pk,
        "branch",
        "improvement ca1",
    )
    assert nodes["a"].parent is None  # its own chain of checkpoints is no edge
    assert [(e.kind, e.via) for e in tree.edges] == [("branch", "improvement ca1")]


def test_a_rollback_is_a_marker_where_the_run_went_back_to(hooked, bob):
    target = scored(hooked, "root", 0.7, by=bob)
    scored(hooked, "root", 0.2, by=bob)
    rb = rollbacks.request_rollback(by=bob, reason="regressed", submission=target).rollback
    tree = trees.project_tree(hooked)
    node = by_name(tree)["root"]
    assert [(e.kind, e.via, e.status) for e in node.rollbacks] == [
        ("rollback", f"submission #{target.pk} (0.7)", "requested")
    ]
    assert [(e.parent, e.child, e.kind) for e in tree.edges] == [(node.pk, node.pk, "rollback")]
    rollbacks.finish(rb.pk, ok=True, detail="HTTP 200")
    assert by_name(trees.project_tree(hooked))["root"].rollbacks[0].status == "applied"


def test_dead_branches_and_the_path_to_the_best(hooked, bob):
    """maximize: root 0.5 → a 0.8 → a1 0.9 (the best); root → b 0.3 (below its parent); a → a2 failed;
    root → c abandoned; an unverified 0.99 counts for nothing."""
    scored(hooked, "root", 0.5, by=bob)
    launched(hooked, bob, "root", "a")
    scored(hooked, "a", 0.8, by=bob)
    launched(hooked, bob, "a", "a1")
    scored(hooked, "a1", 0.9, by=bob)
    launched(hooked, bob, "root", "b")
    scored(hooked, "b", 0.3, by=bob)
    scored(hooked, "b", 0.99, verify=False)
    launched(hooked, bob, "a", "a2")
    ingest(hooked, "a2", {"type": "state", "id": "f", "state": "failed", "failure": {"family": "oom"}})
    launched(hooked, bob, "root", "c")
    services.close_run(
        Run.objects.get(external_id="c"),
        by=bob,
        reason="went silent",
        now=timezone.now() + timedelta(hours=1),
    )
    tree = trees.project_tree(hooked)
    nodes = by_name(tree)
    assert {k: n.dead for k, n in nodes.items()} == {
        "root": "", "a": "", "a1": "", "b": "regressed", "a2": "failed", "c": "abandoned",
    }  # fmt: skip
    assert {k for k, n in nodes.items() if n.on_best_path} == {"root", "a", "a1"}
    assert tree.best == nodes["a1"].pk and tree.best_score == 0.9
    assert nodes["b"].best == 0.3  # verified only
    # The line follows the best: a's subtree goes on with a1, a2 is a side; root's line goes on with a.
    rows = [
        (
            r.kind,
            r.node.run.external_id if r.node else "",
            r.continues,
            r.parent.run.external_id if r.parent else "",
        )
        for r in tree.rows()
    ]
    assert rows == [
        ("open", "root", False, ""),  # a root with runs after it is a subtree that can be closed
        ("sides", "", False, ""),  # the runs that came from it other than the way to the best, one level in
        ("node", "b", False, ""),
        ("node", "c", False, ""),
        ("end_sides", "", False, ""),
        ("node", "a", True, "root"),  # then its line goes on with the child on the way to the best
        ("sides", "", False, ""),
        ("node", "a2", False, ""),
        ("end_sides", "", False, ""),
        ("node", "a1", True, "a"),
        ("close", "", False, ""),
    ]
    assert [r.open for r in tree.rows() if r.kind == "open"] == [True]


def test_a_run_the_best_came_from_is_not_dead_whatever_its_own_end(hooked, bob):
    scored(hooked, "root", 0.5, by=bob)
    launched(hooked, bob, "root", "crashed")
    scored(hooked, "crashed", 0.3, by=bob)  # below its parent, then failed
    ingest(hooked, "crashed", {"type": "state", "id": "f", "state": "failed"})
    launched(hooked, bob, "crashed", "recovered")
    scored(hooked, "recovered", 0.9, by=bob)
    nodes = by_name(trees.project_tree(hooked))
    assert (nodes["crashed"].dead, nodes["crashed"].on_best_path, nodes["recovered"].on_best_path) == (
        "",
        True,
        True,
    )


def test_minimize_turns_the_rules_around(hooked, bob):
    hooked.scenario.direction = "minimize"
    hooked.scenario.save()
    scored(hooked, "root", 0.5, by=bob)
    launched(hooked, bob, "root", "lower")
    scored(hooked, "lower", 0.4, by=bob)
    launched(hooked, bob, "root", "higher")
    scored(hooked, "higher", 0.6, by=bob)
    nodes = by_name(trees.project_tree(hooked))
    assert (nodes["lower"].dead, nodes["higher"].dead) == ("", "regressed")
    assert nodes["lower"].on_best_path and not nodes["higher"].on_best_path


def narrowed(project, **params):
    runs = RunFilter(QueryDict(urlencode(params)), queryset=Run.objects.filter(project=project)).qs
    return trees.project_tree(project, matching=runs)


def test_the_runs_filter_keeps_the_matches_and_the_runs_they_come_from(hooked, bob):
    launched(hooked, bob, "root", "a")
    launched(hooked, bob, "a", "a1")
    ingest(hooked, "a1", {"type": "state", "id": "f", "state": "failed"})
    launched(hooked, bob, "root", "b")
    tree = narrowed(hooked, failed="true")
    nodes = by_name(tree)
    assert set(nodes) == {"root", "a", "a1"}  # b is neither a match nor on a match's way
    assert {k for k, n in nodes.items() if n.matches} == {"a1"}
    assert (tree.matched, tree.total, tree.narrowed) == (1, 4, True)
    assert set(by_name(narrowed(hooked, q="b"))) >= {"root", "b"}
    assert by_name(narrowed(hooked, q="b"))["b"].matches
    assert by_name(narrowed(hooked, state="running")).keys() == {"root", "a", "b"}


def test_under_filters_a_long_way_to_a_match_is_folded_into_one_line(hooked, bob):
    for parent, child in (("root", "a"), ("a", "b"), ("b", "c"), ("c", "d"), ("d", "found-it")):
        launched(hooked, bob, parent, child)
    tree = narrowed(hooked, q="found")
    rows = [
        (
            r.kind,
            r.node.run.external_id if r.node else "",
            r.folded,
            r.parent.run.external_id if r.parent else "",
        )
        for r in tree.rows()
    ]
    assert rows == [
        ("open", "root", 0, ""),
        ("fold", "a", 4, "d"),  # a, b, c, d: four runs that only lead on to the match
        ("node", "found-it", 0, "d"),
        ("close", "", 0, ""),
    ]
    assert [r.node.run.external_id for r in tree.rows(fold=False) if r.node] == [
        "root",
        "a",
        "b",
        "c",
        "d",
        "found-it",
    ]
    # Two in a row are drawn as they are.
    assert [r.kind for r in narrowed(hooked, q="c").rows()] == ["open", "node", "node", "node", "close"]


def test_archived_runs_are_left_out_unless_asked_for(hooked, bob, alice):
    launched(hooked, bob, "root", "a")
    ingest(hooked, "a", {"type": "state", "id": "d", "state": "done"})
    services.archive_run(Run.objects.get(external_id="a"), by=bob)
    assert set(by_name(trees.project_tree(hooked))) == {"root"}
    assert set(by_name(trees.project_tree(hooked, archived=True))) == {"root", "a"}


def test_a_cycle_in_the_links_never_loops(project, bob):
    """Two MLflow runs naming each other as parent (a client can set any tag): one of them is a root."""
    ingest(project, "x", {"type": "state", "id": "s", "state": "running"})
    ingest(project, "y", {"type": "state", "id": "s", "state": "running"})
    services.set_tag(Run.objects.get(external_id="x"), key="mlflow.parentRunId", value="y", by=bob)
    services.set_tag(Run.objects.get(external_id="y"), key="mlflow.parentRunId", value="x", by=bob)
    tree = trees.project_tree(project)
    assert len(tree.roots) == 1 and len(tree.nodes) == 2
    assert len([r for r in tree.rows() if r.node is not None]) == 2


def _grow(project, by, n: int) -> None:
    """`n` runs through the write path: a line of launches with side branches, scores (some verified),
    SMR branches, MLflow parents, a rollback."""
    ingest(project, "g0", {"type": "state", "id": "st", "state": "running"})
    for i in range(1, n):
        parent = f"g{i - 1}" if i % 3 else f"g{max(0, i - 5)}"
        if i % 4 == 0:
            ingest(
                project, f"g{i}",
                {"type": "checkpoint", "id": f"c{i}", "parent": f"c{i - 1}-own", "label": "b"},
            )  # fmt: skip
            ingest(project, parent, {"type": "checkpoint", "id": f"c{i - 1}-own", "label": "own"})
        elif i % 4 == 1:
            ingest(project, f"g{i}", {"type": "state", "id": "st", "state": "running"})
            services.set_tag(
                Run.objects.get(project=project, external_id=f"g{i}"),
                key="mlflow.parentRunId",
                value=parent,
                by=by,
            )
        else:
            launched(project, by, parent, f"g{i}")
        if i % 5 == 0:
            scored(project, f"g{i}", i / n, verify=i % 10 == 0, by=by)
    target = scored(project, "g0", 0.01, by=by)
    rollbacks.request_rollback(by=by, reason="back", submission=target)


def _more_launched(project, n: int, seed: int = 39) -> None:
    """`n` more runs, each launched from a random earlier run, written in bulk: the write path takes
    minutes for thousands of runs, and what the tree reads of a launch is the run's `parent`."""
    import random

    rng = random.Random(seed)
    pks = list(Run.objects.filter(project=project).values_list("pk", flat=True))
    start = timezone.now()
    for i in range(n):
        (run,) = Run.objects.bulk_create(
            [
                Run(
                    project=project,
                    external_id=f"x{i}",
                    parent_id=rng.choice(pks),
                    state=rng.choice(["running", "done", "failed"]),
                    started_at=start + timedelta(seconds=i),
                )
            ]
        )
        pks.append(run.pk)


def test_the_number_of_queries_is_the_same_at_30_and_2000_runs(alice, bob):
    counts: dict[bool, list[int]] = {False: [], True: []}
    kinds = []
    for size in (30, 2000):
        project = admin_project(f"size-{size}", by=alice)
        services.update_project(project, rollback_webhook_url="https://hooks.example/hill")
        services.add_member(project, bob, role=Role.REVIEWER)
        _grow(project, bob, min(size, 600))  # every kind of edge through the write path
        _more_launched(project, size - min(size, 600))
        for filtered in (False, True):
            runs = Run.objects.filter(project=project)
            matching = RunFilter(QueryDict("q=g1"), queryset=runs).qs if filtered else None
            with CaptureQueriesContext(connection) as queries:
                tree = trees.project_tree(project, matching=matching)
                rows = tree.rows()
            counts[filtered].append(len(queries))
            assert len([r for r in rows if r.kind == "open"]) == len([r for r in rows if r.kind == "close"])
            assert sum(r.folded or 1 for r in rows if r.node is not None) == len(tree.nodes)
            assert [r.kind for r in rows].count("sides") == [r.kind for r in rows].count("end_sides")
            if not filtered:
                assert len(tree.nodes) == size
                kinds.append({e.kind for e in tree.edges})
            else:
                assert 0 < tree.matched < size
    assert counts[False][0] == counts[False][1] <= 5, counts
    assert counts[True][0] == counts[True][1] <= 6, counts
    assert kinds[1] == {"launch", "branch", "nested", "rollback"}
