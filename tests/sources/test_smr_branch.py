"""An SMR run branched from a checkpoint (the SDK's `branch_run_from_checkpoint`, against the simulator): the
poller brings the new run in, its first checkpoint continuing the one it was branched from, and the tree of
attempts draws it as a `branch` of the run holding that checkpoint (issue 39)."""

from __future__ import annotations

import pytest

from smrweb.sources import sync
from smrweb.sources.smr import connector_for
from smrweb.tracking.models import Checkpoint, Run
from smrweb.tracking.queries import tree as trees
from tests.sources.smr_project import smr_project_on

pytestmark = pytest.mark.django_db(transaction=True)

API_KEY, SMR_PROJECT = "branch-key", "smr-branch"


@pytest.fixture
def simulator(start_sim):
    return start_sim(api_key=API_KEY, project_ids=[SMR_PROJECT], runs=2, seed=5, warmup=30, auto_tick=False)


@pytest.fixture
def smr_project(alice, bob, victor, simulator):
    return smr_project_on(
        simulator, slug="smr-branch", key="bsim", api_key=API_KEY, smr_project=SMR_PROJECT,
        alice=alice, bob=bob, victor=victor,
    )  # fmt: skip


def test_a_run_branched_from_a_checkpoint_is_a_branch_in_the_tree(smr_project, simulator):
    source = Checkpoint.objects.filter(run__project=smr_project, restorable=True).order_by("ts", "id").first()
    assert source is not None, "the simulated runs captured a restorable checkpoint during warm-up"
    client = connector_for(smr_project).client
    answer = client.branch_run_from_checkpoint(
        source.run.external_id,
        project_id=SMR_PROJECT,
        checkpoint_id=source.external_id,
        reason="try from here",
    )
    assert (answer.parent_run_id, answer.source_checkpoint_id) == (source.run.external_id, source.external_id)
    child_id = answer.child_run_id
    for _ in range(8):  # the branched run starts, climbs and captures its first checkpoint
        simulator.world.tick(10)
        sync.sync_project(smr_project, owner="test")
        if Checkpoint.objects.filter(run__external_id=child_id).exists():
            break
    first = Checkpoint.objects.filter(run__external_id=child_id).order_by("ts", "id").first()
    assert first is not None and first.parent_external_id == source.external_id
    tree = trees.project_tree(smr_project)
    nodes = {n.run.external_id: n for n in tree.nodes.values()}
    child = nodes[child_id]
    assert (child.parent, child.kind, child.via) == (source.run.pk, "branch", source.label)
    assert Run.objects.get(external_id=child_id).parent is None  # no launch: the edge is the branch alone
    branches = [e for e in tree.edges if e.kind == "branch"]
    assert [(e.parent, e.child) for e in branches] == [(source.run.pk, child.pk)]
