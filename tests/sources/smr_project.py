"""A project polling the SMR simulator, with a reviewer and a viewer, synced once: what the SMR action,
steering and launch tests all start from."""

from __future__ import annotations

from smrweb.sources import sync
from smrweb.tracking import services
from tests.factories import admin_project


def smr_project_on(simulator, *, slug: str, key: str, api_key: str, smr_project: str, alice, bob, victor):
    scenario = services.create_scenario(key=key, name=key, score_metric="val_loss", direction="minimize")
    project = admin_project(
        slug,
        scenario=scenario,
        source="smr",
        smr_project_id=smr_project,
        smr_backend_base=simulator.url,
        smr_api_key=api_key,
        by=alice,
    )
    services.add_member(project, bob, role="reviewer")
    services.add_member(project, victor, role="viewer")
    sync.sync_project(project, owner="test")
    return project
