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


def simulator_factory(start_sim, **defaults):
    """`sim(**options)`: a simulator with this module's defaults, any of them overridden per test."""

    def _start(**options):
        return start_sim(**{**defaults, **options})

    return _start


def bind_to(simulator, alice, *, slug: str, smr_project: str, api_key: str):
    """A project of alice's polling `smr_project` on the simulator with its own key."""
    return admin_project(
        slug,
        source="smr",
        smr_project_id=smr_project,
        smr_backend_base=simulator.url,
        smr_api_key=api_key,
        by=alice,
    )


def synced(project) -> sync.SyncReport:
    """One whole sync, which must meet no fault."""
    report = sync.sync_project(project, owner="test")
    assert not report.error, report.error
    return report
